//! runner (wip)
