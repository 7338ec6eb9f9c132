//! The live header's KernelCh words (`format::live::KERNEL_CH_STARTED`, `..._STOPPED`):
//! which collective's kernel a rank's device last began, and last finished, a channel of,
//! as NCCL's profiler names it: the communicator (its hash folded to `COMM_TAG_BITS`), the
//! function and NCCL's per-function sequence number (`comm->seqNumber[func]`). One word,
//! stored whole, so a reader never sees half of one event and half of another.

/// Bits of NCCL's communicator hash kept: tells a rank's communicators apart.
pub const COMM_TAG_BITS: u32 = 14;
const FUNC_BITS: u32 = 4;
const SEQ_BITS: u32 = 64 - COMM_TAG_BITS - FUNC_BITS;

/// NCCL's 64-bit communicator hash folded to `COMM_TAG_BITS`.
pub fn comm_tag(comm_hash: u64) -> u16 {
    let folded = comm_hash ^ comm_hash >> 14 ^ comm_hash >> 28 ^ comm_hash >> 42 ^ comm_hash >> 56;
    (folded & ((1 << COMM_TAG_BITS) - 1)) as u16
}

/// One collective as the KernelCh words name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelChKey {
    pub comm_tag: u16,
    /// NCCL's function (`FUNC_NAMES` index), kept to `FUNC_BITS`.
    pub func: u8,
    /// NCCL's sequence number of that function on that communicator.
    pub seq: u64,
}

impl KernelChKey {
    pub fn new(comm_hash: u64, func: u8, seq: u64) -> KernelChKey {
        KernelChKey { comm_tag: comm_tag(comm_hash), func: func & ((1 << FUNC_BITS) - 1), seq }
    }

    /// The word: never 0 (the sequence is stored plus one).
    pub fn word(self) -> u64 {
        let seq = self.seq.wrapping_add(1) & ((1 << SEQ_BITS) - 1);
        u64::from(self.comm_tag) << (FUNC_BITS + SEQ_BITS) | u64::from(self.func) << SEQ_BITS | seq.max(1)
    }

    /// The key a word holds; `None` for 0 (none yet).
    pub fn of_word(word: u64) -> Option<KernelChKey> {
        let seq = word & ((1 << SEQ_BITS) - 1);
        (seq != 0).then(|| KernelChKey {
            comm_tag: (word >> (FUNC_BITS + SEQ_BITS)) as u16,
            func: ((word >> SEQ_BITS) & ((1 << FUNC_BITS) - 1)) as u8,
            seq: seq - 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_through_its_word_and_zero_is_none() {
        let key = KernelChKey::new(0xf501_4290_478f_a6e3, 4, 5);
        assert_eq!(KernelChKey::of_word(key.word()), Some(key));
        assert_eq!(KernelChKey::of_word(0), None);
        assert_ne!(KernelChKey::new(0x336b_beb4_51f8_3b08, 4, 5).comm_tag, key.comm_tag);
        assert!(KernelChKey::new(u64::MAX, 255, u64::MAX).word() != 0);
    }
}
