//! Hint protocol and client (being written).
