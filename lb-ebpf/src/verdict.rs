//! What a per-packet program does with a packet: ground level, so that
//! every step (the NodePort logic, rejects) can say it.

/// What becomes of a packet.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On to the kernel (or the next program), rewritten or not.
    Pass,
    Drop,
    /// Rewritten into an answer, sent back out where it came in.
    Bounce,
    /// Rewritten into an answer and handed to another device already
    /// (tc only): the program says so.
    Redirected,
}
