//! leader (wip)
