//! The kernel edge: reading BTF for the task fields the programs need (`btf`), loading and
//! attaching the eBPF programs (`ebpf`, with the object's maps set up by `object`), decoding
//! what they send (`decode`), what this kernel gives (`features`), and the capabilities that loading takes and montrace then drops
//! (`privilege`).
pub mod btf;
pub mod decode;
pub mod ebpf;
pub mod features;
pub mod object;
pub mod privilege;
