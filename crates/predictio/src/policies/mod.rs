//! Policies that ship with the core.
//!
//! | policy | wants | does |
//! | --- | --- | --- |
//! | [`hints::HintPolicy`] (`hints`) | `Pages`, `ReadPlan` | asks for exactly what a program said it will read, as imminent |

pub mod hints;

use crate::policy::Policy;

/// Names of the policies [`by_name`] knows.
pub const NAMES: [&str; 1] = ["hints"];

/// A policy by its name.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "hints" => Some(Box::new(hints::HintPolicy::default())),
        _ => None,
    }
}
