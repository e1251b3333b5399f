//! The kv-aware policy's book of KV reservations on one engine, kept deadlock-free with the
//! banker's algorithm.
//!
//! Every rollout bound to an engine holds an *allocation* (KV tokens set aside for it now) and
//! has a *claim* (the most it can ever need: prompt + response budget). The engine is never
//! asked to hold more than the sum of the allocations, and that sum never exceeds the
//! capacity, so the engine never has to preempt. An allocation grows only when the state
//! stays *safe*: some order exists in which every bound rollout can be given the rest of its
//! claim and finish, each freeing what it held for the next. So however long the rollouts
//! turn out, they all finish without an eviction and without a deadlock.
//!
//! Allocations may be smaller than claims: a rollout waiting for a tool holds only its
//! context, and with segmented turns a generating rollout holds its context plus one
//! segment. Both the [`Dispatcher`](crate::Dispatcher) and the [simulator](crate::simulate)
//! keep one ledger per engine.

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    alloc: u64,
    claim: u64,
}

/// Reservations on one engine under the banker's algorithm: every bound rollout holds an
/// allocation and has a claim (the most it can ever hold); allocations grow only while some
/// order remains in which every rollout can get the rest of its claim and finish.
///
/// ```
/// use rstar_scheduler::KvLedger;
///
/// let mut book = KvLedger::new(1000);
/// // Two rollouts that may each grow to 700 tokens, holding 200 now.
/// assert!(book.admit(1, 200, 700));
/// assert!(book.admit(2, 200, 700));
/// // Rollout 1 grows to 450: 350 stay free, enough for it to finish (250 more), after
/// // which rollout 2 has room too.
/// assert!(book.grow(1, 450));
/// // Rollout 2 growing to 450 would leave 100 free while each still needs 250.
/// assert!(!book.can_grow(2, 450));
/// // Growing it to 300 leaves 250: rollout 1 can finish first, then rollout 2.
/// assert!(book.grow(2, 300));
/// assert_eq!(book.reserved(), 750);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvLedger {
    capacity: u64,
    reserved: u64,
    peak: u64,
    largest_claim: u64,
    version: u64,
    entries: HashMap<u64, Entry>,
}

impl KvLedger {
    /// An empty ledger for an engine of `capacity` KV tokens.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    /// The capacity in tokens.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens allocated to bound rollouts now.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// The most tokens ever allocated at once.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Capacity not allocated.
    pub fn free(&self) -> u64 {
        self.capacity - self.reserved
    }

    /// A counter that moves whenever an allocation changes: a check that failed cannot
    /// succeed before it moves, so callers may skip repeating it.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Rollouts bound to the engine.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no rollout is bound.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A bound rollout's allocation, if it is bound.
    pub fn allocation(&self, id: u64) -> Option<u64> {
        self.entries.get(&id).map(|e| e.alloc)
    }

    /// Whether a new rollout holding `alloc` tokens now and claiming at most `claim` can be
    /// bound (`alloc <= claim`) without making the state unsafe.
    pub fn can_admit(&self, alloc: u64, claim: u64) -> bool {
        alloc <= claim && self.safe_with(None, alloc, Some(claim))
    }

    /// Binds rollout `id` if [`Self::can_admit`]; returns whether it did. An `id` already
    /// bound is refused.
    pub fn admit(&mut self, id: u64, alloc: u64, claim: u64) -> bool {
        if self.entries.contains_key(&id) || !self.can_admit(alloc, claim) {
            return false;
        }
        self.entries.insert(id, Entry { alloc, claim });
        self.largest_claim = self.largest_claim.max(claim);
        self.add(alloc);
        true
    }

    /// Whether bound rollout `id` can grow to `alloc` tokens (at most its claim) safely.
    pub fn can_grow(&self, id: u64, alloc: u64) -> bool {
        match self.entries.get(&id) {
            Some(e) if alloc >= e.alloc && alloc <= e.claim => {
                self.safe_with(Some(id), alloc - e.alloc, None)
            }
            _ => false,
        }
    }

    /// Grows bound rollout `id` to `alloc` tokens if [`Self::can_grow`]; returns whether it
    /// did.
    pub fn grow(&mut self, id: u64, alloc: u64) -> bool {
        if !self.can_grow(id, alloc) {
            return false;
        }
        let e = self.entries.get_mut(&id).expect("checked");
        let extra = alloc - e.alloc;
        e.alloc = alloc;
        self.add(extra);
        true
    }

    /// Shrinks bound rollout `id` to `alloc` tokens (no-op when it holds less or is not
    /// bound). Shrinking never makes a safe state unsafe.
    pub fn shrink(&mut self, id: u64, alloc: u64) {
        if let Some(e) = self.entries.get_mut(&id)
            && alloc < e.alloc
        {
            self.reserved -= e.alloc - alloc;
            e.alloc = alloc;
            self.version += 1;
        }
    }

    /// Unbinds rollout `id`, freeing its allocation; returns what it held.
    pub fn remove(&mut self, id: u64) -> u64 {
        let alloc = self.entries.remove(&id).map_or(0, |e| e.alloc);
        self.reserved -= alloc;
        self.version += 1;
        alloc
    }

    /// The smallest capacity at which the current allocations stay safe: what they hold now
    /// plus the most that must be free for them to finish one at a time (in order of
    /// remaining need, which is optimal for one resource).
    pub fn min_safe_capacity(&self) -> u64 {
        let mut rest: Vec<(u64, u64)> = self
            .entries
            .values()
            .map(|e| (e.claim - e.alloc, e.alloc))
            .collect();
        rest.sort_unstable();
        let (mut free_needed, mut released) = (0u64, 0u64);
        for (need, alloc) in rest {
            free_needed = free_needed.max(need.saturating_sub(released));
            released += alloc;
        }
        self.reserved + free_needed
    }

    /// Changes the capacity (an engine reporting that other clients now hold, or gave back,
    /// part of its KV cache), but never below [`Self::min_safe_capacity`]: a state that was
    /// safe stays safe, so every bound rollout can still finish. Returns the capacity applied.
    pub fn set_capacity(&mut self, capacity: u64) -> u64 {
        let applied = capacity.max(self.min_safe_capacity());
        if applied != self.capacity {
            self.capacity = applied;
            self.version += 1;
        }
        applied
    }

    /// Whether the current state is safe (it always is when only this type changed it).
    pub fn is_safe(&self) -> bool {
        self.safe_with(None, 0, None)
    }

    fn add(&mut self, tokens: u64) {
        self.version += 1;
        self.reserved += tokens;
        assert!(self.reserved <= self.capacity, "KV ledger over capacity");
        self.peak = self.peak.max(self.reserved);
    }

    /// The banker's check after giving `extra` more tokens to `grown` (or admitting a new
    /// rollout holding `extra` with claim `new_claim`).
    fn safe_with(&self, grown: Option<u64>, extra: u64, new_claim: Option<u64>) -> bool {
        let Some(after) = self.reserved.checked_add(extra) else {
            return false;
        };
        if after > self.capacity {
            return false;
        }
        // Fast path: whatever any rollout still needs fits in what stays free, so they can
        // finish one at a time in any order.
        let largest = self.largest_claim.max(new_claim.unwrap_or(0));
        if after.saturating_add(largest) <= self.capacity {
            return true;
        }
        // Single resource: finishing the rollouts in order of remaining need is optimal.
        let mut rest: Vec<(u64, u64)> = self
            .entries
            .iter()
            .map(|(id, e)| {
                let alloc = e.alloc + if Some(*id) == grown { extra } else { 0 };
                (e.claim - alloc, alloc)
            })
            .collect();
        if let Some(claim) = new_claim {
            rest.push((claim - extra, extra));
        }
        rest.sort_unstable();
        let mut avail = self.capacity - after;
        for (need, alloc) in rest {
            if need > avail {
                return false;
            }
            avail += alloc;
        }
        true
    }
}

/// The kv-aware admission decision over per-engine ledgers: among the engines not in `skip`
/// that can admit a rollout holding `alloc` tokens with claim `claim`, the one with the most
/// free tokens (ties to the lowest index). `None` means the rollout waits.
pub fn choose_ledger(ledgers: &[KvLedger], skip: &[bool], alloc: u64, claim: u64) -> Option<usize> {
    ledgers
        .iter()
        .enumerate()
        .filter(|(i, l)| !skip.get(*i).copied().unwrap_or(false) && l.can_admit(alloc, claim))
        .max_by_key(|(i, l)| (l.free(), std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_claims_only_need_to_fit() {
        let mut l = KvLedger::new(100);
        assert!(l.admit(0, 60, 60));
        assert!(!l.can_admit(41, 41));
        assert!(l.admit(1, 40, 40));
        assert_eq!((l.reserved(), l.free(), l.len()), (100, 0, 2));
        assert!(!l.admit(1, 0, 0), "already bound");
        assert_eq!(l.remove(0), 60);
        assert_eq!(l.reserved(), 40);
        assert_eq!(l.peak(), 100);
    }

    #[test]
    fn bankers_check_written_out() {
        // Capacity 10; A holds 3 of 9, B holds 2 of 4: free 5. B can finish (needs 2), then
        // 7 are free and A (needs 6) can: safe.
        let mut l = KvLedger::new(10);
        assert!(l.admit(0, 3, 9));
        assert!(l.admit(1, 2, 4));
        assert!(l.is_safe());
        // Giving A 2 more leaves 3 free: B finishes (needs 2), then 5 are free and A needs 4.
        assert!(l.can_grow(0, 5));
        // Giving A 4 more leaves 1 free: B and A both need 2.
        assert!(!l.can_grow(0, 7));
        // A new rollout holding 3 of 3 leaves 2 free: it finishes at once (5 free), then B
        // (7 free), then A (needs 6): safe.
        assert!(l.can_admit(3, 3));
        // Holding 4 of 6 leaves 1 free while the newcomer, B and A need 2, 2 and 6.
        assert!(!l.can_admit(4, 6));
        // Holding 4 of 5 is safe: the newcomer needs 1, then frees 5.
        assert!(l.can_admit(4, 5));
        // Growing past the claim or an unknown rollout is refused.
        assert!(!l.can_grow(1, 5));
        assert!(!l.can_grow(9, 1));
        l.shrink(0, 1);
        assert_eq!(l.allocation(0), Some(1));
        assert_eq!(l.reserved(), 3);
        assert!(l.is_safe());
    }

    #[test]
    fn capacity_shrinks_only_as_far_as_stays_safe() {
        // A holds 3 of 9, B holds 2 of 4 (reserved 5). In order of need: B needs 2 with
        // nothing released yet, then A needs 6 with B's 2 released: 4. So 5 + max(2, 4) = 9.
        let mut l = KvLedger::new(20);
        assert!(l.admit(0, 3, 9));
        assert!(l.admit(1, 2, 4));
        assert_eq!(l.min_safe_capacity(), 9);
        let v = l.version();
        assert_eq!(l.set_capacity(6), 9, "clamped to the safe floor");
        assert!(l.version() > v, "a changed capacity moves the version");
        assert_eq!((l.capacity(), l.free()), (9, 4));
        assert!(l.is_safe());
        // At the floor a newcomer that would need 7 more is refused (B can finish, A then
        // cannot), though at the old capacity it fits; A may not grow past what keeps B
        // finishable.
        assert!(!l.can_admit(2, 9));
        assert!(
            KvLedger {
                capacity: 20,
                ..l.clone()
            }
            .can_admit(2, 9)
        );
        assert!(l.can_grow(0, 5) && !l.can_grow(0, 6));
        // Capacity given back is used again.
        assert_eq!(l.set_capacity(30), 30);
        assert!(l.can_admit(10, 10));
        // An empty ledger can shrink to nothing.
        assert_eq!(KvLedger::new(50).set_capacity(0), 0);
    }

    #[test]
    fn choose_ledger_prefers_most_free_and_skips() {
        let mut a = KvLedger::new(100);
        assert!(a.admit(0, 50, 50));
        let b = KvLedger::new(100);
        let ledgers = [a, b.clone(), b];
        assert_eq!(choose_ledger(&ledgers, &[], 10, 10), Some(1));
        assert_eq!(choose_ledger(&ledgers, &[false, true], 10, 10), Some(2));
        assert_eq!(
            choose_ledger(&ledgers, &[false, true, true], 10, 10),
            Some(0)
        );
        assert_eq!(choose_ledger(&ledgers, &[false, true, true], 51, 51), None);
    }
}
