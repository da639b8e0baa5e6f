//! eBPF observation (being written).
