//! Exact integer arithmetic behind the task answers (no floating point anywhere).

use num_bigint::BigUint;

/// `base^exp mod modulus` by square-and-multiply in `u128`. `modulus` must be positive.
pub fn mod_pow(base: u64, exp: u64, modulus: u64) -> u64 {
    assert!(modulus > 0, "modulus must be positive");
    let m = u128::from(modulus);
    let mut result = 1u128 % m;
    let mut b = u128::from(base) % m;
    let mut e = exp;
    while e > 0 {
        if e & 1 == 1 {
            result = result * b % m;
        }
        b = b * b % m;
        e >>= 1;
    }
    result as u64
}

/// Prime factorisation by trial division, primes ascending with their exponents.
pub fn factorize(mut n: u64) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut p = 2u64;
    while p * p <= n {
        if n.is_multiple_of(p) {
            let mut k = 0;
            while n.is_multiple_of(p) {
                n /= p;
                k += 1;
            }
            out.push((p, k));
        }
        p += if p == 2 { 1 } else { 2 };
    }
    if n > 1 {
        out.push((n, 1));
    }
    out
}

/// The number of positive divisors: `∏ (a_i + 1)` over `n = ∏ p_i^a_i`.
pub fn divisor_count(n: u64) -> u64 {
    factorize(n)
        .iter()
        .map(|&(_, a)| u64::from(a) + 1)
        .product()
}

/// The sum of positive divisors: `∏ (p^(a+1) − 1)/(p − 1)`.
pub fn divisor_sum(n: u64) -> u128 {
    factorize(n)
        .iter()
        .map(|&(p, a)| {
            let p = u128::from(p);
            (p.pow(a + 1) - 1) / (p - 1)
        })
        .product()
}

/// The sum of the multiples of `k` in `[lo, hi]`, by the arithmetic-series formula.
pub fn sum_of_multiples(lo: u64, hi: u64, k: u64) -> u128 {
    assert!(k > 0, "k must be positive");
    let first = lo.div_ceil(k) * k;
    let last = hi / k * k;
    if first > hi || last < lo {
        return 0;
    }
    let count = u128::from((last - first) / k + 1);
    count * (u128::from(first) + u128::from(last)) / 2
}

/// `n` written in base `base` (2..=10), most significant digit first.
pub fn to_base(mut n: u64, base: u64) -> String {
    assert!((2..=10).contains(&base), "base must be in 2..=10");
    if n == 0 {
        return "0".to_string();
    }
    let mut digits = Vec::new();
    while n > 0 {
        digits.push(char::from(b'0' + (n % base) as u8));
        n /= base;
    }
    digits.iter().rev().collect()
}

/// `base^exp`, exactly.
pub fn big_pow(base: u64, exp: u32) -> BigUint {
    BigUint::from(base).pow(exp)
}

/// The sum of the decimal digits of `n`.
pub fn digit_sum(n: &BigUint) -> u64 {
    n.to_string().bytes().map(|b| u64::from(b - b'0')).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_values() {
        assert_eq!(mod_pow(2, 10, 1000), 24); // 1024
        assert_eq!(mod_pow(3, 0, 7), 1);
        assert_eq!(mod_pow(5, 3, 1), 0);
        assert_eq!(mod_pow(7, 222, 1000), 49); // 7^4 ≡ 401, 7^20 ≡ 1 (mod 1000), 7^222 ≡ 7^2
        assert_eq!(factorize(360), vec![(2, 3), (3, 2), (5, 1)]);
        assert_eq!(factorize(97), vec![(97, 1)]);
        assert_eq!(divisor_count(12), 6);
        assert_eq!(divisor_count(720_720), 240); // 2^4·3^2·5·7·11·13 → 5·3·2·2·2·2
        assert_eq!(divisor_sum(12), 28);
        assert_eq!(divisor_sum(28), 56); // perfect
        assert_eq!(divisor_sum(1), 1);
        assert_eq!(sum_of_multiples(1, 10, 3), 18);
        assert_eq!(sum_of_multiples(4, 5, 3), 0);
        assert_eq!(sum_of_multiples(1, 100, 1), 5050);
        assert_eq!(to_base(255, 2), "11111111");
        assert_eq!(to_base(100, 7), "202");
        assert_eq!(big_pow(7, 23).to_string(), "27368747340080916343");
        assert_eq!(digit_sum(&big_pow(2, 100)), 115);
        assert_eq!(digit_sum(&big_pow(2, 15)), 26); // 32768
    }

    fn brute_pow(b: u64, e: u64, m: u64) -> u64 {
        (0..e).fold(1 % m, |acc, _| acc * (b % m) % m)
    }

    proptest::proptest! {
        #[test]
        fn mod_pow_matches_repeated_multiplication(b in 0u64..1000, e in 0u64..300, m in 1u64..2000) {
            proptest::prop_assert_eq!(mod_pow(b, e, m), brute_pow(b, e, m));
        }

        #[test]
        fn divisor_functions_match_brute_force(n in 1u64..5000) {
            let divisors: Vec<u64> = (1..=n).filter(|d| n % d == 0).collect();
            proptest::prop_assert_eq!(divisor_count(n), divisors.len() as u64);
            proptest::prop_assert_eq!(divisor_sum(n), divisors.iter().map(|&d| u128::from(d)).sum::<u128>());
            let back: u64 = factorize(n).iter().map(|&(p, a)| p.pow(a)).product();
            proptest::prop_assert_eq!(back, n);
        }

        #[test]
        fn multiples_match_brute_force(lo in 0u64..500, len in 0u64..500, k in 1u64..40) {
            let hi = lo + len;
            let brute: u128 = (lo..=hi).filter(|x| x % k == 0).map(u128::from).sum();
            proptest::prop_assert_eq!(sum_of_multiples(lo, hi, k), brute);
        }

        #[test]
        fn base_round_trips(n in 0u64..1_000_000, base in 2u64..=10) {
            let s = to_base(n, base);
            proptest::prop_assert_eq!(u64::from_str_radix(&s, base as u32).unwrap(), n);
        }
    }
}
