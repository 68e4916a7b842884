//! The process tree: the pure state machine that kernel events (or events made from /proc)
//! drive (`tracker`), and the /proc poller used where eBPF is not available (`polling`).
pub mod polling;
pub mod tracker;
