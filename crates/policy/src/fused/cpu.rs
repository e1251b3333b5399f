//! The instruction sets the fused kernels run with, chosen at run time (issue #72): one
//! portable binary, built for baseline x86-64, runs each kernel compiled for AVX-512
//! (x86-64-v4), for AVX2 with FMA (x86-64-v3), or for the baseline, whichever is the best the
//! CPU has. [`multiversion!`](crate::fused::cpu) writes a kernel's body three times, each under
//! its `#[target_feature]` (the closures inside inherit the features, so rayon's row tasks run
//! the wide code too), and calls the one [`level`] names.
//!
//! Every level gives the same bits: Rust never fuses a multiply and an add on its own, and the
//! kernels fix their summation order ([`super::kernels`]' eight partial sums), so a wider vector
//! changes how many lanes run at once, not what each computes. The tests run every kernel at
//! each level the machine has and compare the bits.
//!
//! `RSTAR_CPU_LEVEL=base|avx2|avx512` caps the level (to measure one against another); a level
//! the CPU lacks is never used.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level of the fused kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Baseline x86-64 (SSE2), or any other architecture.
    Base,
    /// AVX2 with FMA (x86-64-v3).
    Avx2,
    /// AVX-512 F, BW, DQ and VL, with AVX2 and FMA (x86-64-v4).
    Avx512,
}

impl Level {
    /// The name `RSTAR_CPU_LEVEL` takes and the bench prints.
    pub fn name(self) -> &'static str {
        match self {
            Level::Base => "base",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            2 => Level::Avx512,
            1 => Level::Avx2,
            _ => Level::Base,
        }
    }
}

/// The best level this CPU runs.
pub fn detected() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Level::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Level::Avx2;
        }
    }
    Level::Base
}

/// `u8::MAX` until first read; then the level in use.
static LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);

/// The level the kernels run at: [`detected`], capped by `RSTAR_CPU_LEVEL` and by [`cap`].
pub fn level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        u8::MAX => {
            let mut level = detected();
            if let Ok(name) = std::env::var("RSTAR_CPU_LEVEL") {
                let asked = match name.as_str() {
                    "base" => Level::Base,
                    "avx2" => Level::Avx2,
                    _ => Level::Avx512,
                };
                level = level.min(asked);
            }
            LEVEL.store(level as u8, Ordering::Relaxed);
            level
        }
        v => Level::from_u8(v),
    }
}

/// Runs the kernels at `level` at most (never above [`detected`]) from now on, for every
/// thread; returns the level now in use. Every level gives the same bits, so a test that caps
/// it changes no other test's results.
pub fn cap(level: Level) -> Level {
    let level = level.min(detected());
    LEVEL.store(level as u8, Ordering::Relaxed);
    level
}

/// A kernel compiled three times (AVX-512, AVX2 with FMA, baseline) and dispatched on
/// [`level`] at each call. The body is written once; each copy is a function with its
/// `#[target_feature]`, so its closures and the `#[inline(always)]` helpers they call are
/// compiled for that level.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
                fn avx512($($arg: $ty),*) $(-> $ret)? $body
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? $body
                #[allow(
                    unsafe_code,
                    reason = "calling a #[target_feature] copy once `level` found its features"
                )]
                match $crate::fused::cpu::level() {
                    // SAFETY: `level` names a level only when `detected` found its features on
                    // this CPU.
                    $crate::fused::cpu::Level::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    $crate::fused::cpu::Level::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::fused::cpu::Level::Base => {}
                }
            }
            $body
        }
    };
}

pub(crate) use multiversion;
