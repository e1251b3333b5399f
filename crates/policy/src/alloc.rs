//! Keeping freed tensor memory in the process on the CPU backend.
//!
//! Burn's `flex` backend allocates a fresh buffer for nearly every operation. A training step
//! of even the embedded default's 0.8M-parameter model makes tensors of tens of megabytes
//! (attention scores are `batch × heads × seq²`), and glibc's `malloc` serves every block
//! above its mmap threshold (at most 32 MiB) with a fresh `mmap`, which the kernel fills with
//! zeroed pages one fault at a time, and returns it with `munmap` on free. On the 2-core
//! development machine a quarter of an SFT step was spent in the kernel doing that.
//! [`keep_freed_memory`] tells glibc to take every block from its heap and never give freed
//! memory back, so the next step reuses the pages (an SFT step of the embedded default 1.2×
//! faster; see `docs/training.md`). The price is that the process keeps its peak heap size
//! until it exits, which is what a trainer wants.

/// Makes glibc's `malloc` serve every block from its heap (no `mmap` per large block) and
/// never trim freed memory back to the kernel. Call it once, first thing in `main`, before
/// other threads start: the `rstar` binary and the policy benchmark do. Returns whether the
/// settings took (always `false` off glibc/Linux, where it does nothing).
pub fn keep_freed_memory() -> bool {
    imp::keep_freed_memory()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    #![allow(unsafe_code)] // reason: mallopt is a C call; it only changes malloc's parameters

    pub(super) fn keep_freed_memory() -> bool {
        // SAFETY: mallopt takes two integers and touches only malloc's own parameters, under
        // malloc's lock; no Rust invariant depends on them.
        let mmap = unsafe { libc::mallopt(libc::M_MMAP_MAX, 0) };
        // SAFETY: as above.
        let trim = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) };
        mmap == 1 && trim == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub(super) fn keep_freed_memory() -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #![allow(unsafe_code)] // reason: mallinfo2 is a C call, to read what malloc did

    /// Bytes glibc holds in mmap'd blocks.
    fn mmapped_bytes() -> usize {
        // SAFETY: mallinfo2 only reads malloc's statistics.
        unsafe { libc::mallinfo2() }.hblkhd
    }

    #[test]
    fn large_blocks_come_from_the_heap_once_set() {
        const BLOCK: usize = 48 << 20; // above glibc's largest mmap threshold (32 MiB)
        let fill = |round: u8| {
            let mut v = vec![round; BLOCK];
            v[BLOCK - 1] = 7;
            std::hint::black_box(&mut v);
            (
                mmapped_bytes(),
                v.iter().map(|&b| u64::from(b)).sum::<u64>(),
            )
        };
        // mallinfo2 is process-wide and the crate's other tests allocate and free blocks of
        // about 1 MiB on other threads meanwhile, so the checks allow for half a block of
        // their traffic: what they look for is whether the 48 MiB block itself was mapped.
        // Before: such a block is its own mapping.
        let before = mmapped_bytes();
        let (during, _) = fill(1);
        assert!(
            during >= before + BLOCK / 2,
            "a 48 MiB block should be mmap'd by default"
        );
        assert!(super::keep_freed_memory(), "mallopt refused a setting");
        for round in 0..2u8 {
            let base = mmapped_bytes();
            let (during, sum) = fill(round);
            assert!(
                during < base + BLOCK / 2,
                "round {round}: the block was mmap'd ({base} → {during} bytes mapped)"
            );
            assert_eq!(sum, u64::from(round) * (BLOCK as u64 - 1) + 7);
        }
    }
}
