//! events (wip)
