//! Eviction signals and hard thresholds (pure): parsing `evictionHard` / `--eviction-hard`,
//! deciding which thresholds an observation crosses, and the node conditions they raise.
//!
//! Mirrors k/k `pkg/kubelet/eviction/api/types.go` and `helpers.go` (`ParseThresholdConfig`,
//! `thresholdsMet`, `nodeConditions`, `nodeConditionsObservedSince`) and the doc page "Node-pressure
//! Eviction" (kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// An eviction signal (`memory.available`, `nodefs.available`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `memory.available`: node memory capacity − working set, bytes.
    MemoryAvailable,
    /// `nodefs.available`: free bytes on the filesystem of the kubelet root directory.
    NodeFsAvailable,
    /// `nodefs.inodesFree`: free inodes there.
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes on the container runtime's image filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`: free inodes there.
    ImageFsInodesFree,
    /// `pid.available`: `kernel.pid_max` − number of tasks (processes and threads).
    PidAvailable,
}

impl Signal {
    /// Every signal, in the Go kubelet's evaluation order.
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The signal's name as written in `evictionHard`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The node condition the signal raises (`signalToNodeCondition`).
    pub fn node_condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable => NodeCondition::MemoryPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// The resource eviction reclaims for it (`signalToResource`): `memory`,
    /// `ephemeral-storage`, `inodes` or `pids`.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// True for the image filesystem's signals.
    pub fn is_imagefs(self) -> bool {
        matches!(self, Signal::ImageFsAvailable | Signal::ImageFsInodesFree)
    }
}

/// A node pressure condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeCondition {
    /// `MemoryPressure`.
    MemoryPressure,
    /// `DiskPressure`.
    DiskPressure,
    /// `PIDPressure`.
    PidPressure,
}

impl NodeCondition {
    /// The condition type as the API spells it.
    pub fn type_name(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

/// A threshold's value: an absolute quantity (bytes, inodes or PIDs) or a fraction of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    /// Absolute amount.
    Quantity(u64),
    /// Fraction of capacity, 0.0..=1.0, kept as `f32` as the Go kubelet keeps it (so `10%` of a
    /// capacity gives exactly the bytes the Go kubelet computes).
    Percentage(f32),
}

/// A hard eviction threshold: `signal < value`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    /// The signal.
    pub signal: Signal,
    /// The value under which the signal counts as crossed.
    pub value: ThresholdValue,
}

impl Threshold {
    /// The threshold in absolute units for `capacity` (`GetThresholdQuantity`): a percentage is
    /// `int64(float64(capacity) * float64(percentage))`.
    pub fn quantity(&self, capacity: u64) -> u64 {
        match self.value {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * p as f64) as u64,
        }
    }
}

/// Errors from parsing eviction thresholds (messages as the Go kubelet's
/// `ParseThresholdConfig`).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ThresholdError {
    /// No `<` operator.
    #[error("invalid eviction threshold syntax {0:?}, expected <signal><operator><value>")]
    Syntax(String),
    /// Unknown signal name.
    #[error("unsupported eviction signal {0}")]
    Signal(String),
    /// A percentage outside 0%..100%.
    #[error("eviction percentage threshold {signal} must be >= 0% and <= 100%: {value}")]
    Percentage {
        /// The signal.
        signal: String,
        /// The value as given.
        value: String,
    },
    /// A quantity that does not parse or is negative.
    #[error("invalid eviction threshold value {value:?} for {signal}: {why}")]
    Quantity {
        /// The signal.
        signal: String,
        /// The value as given.
        value: String,
        /// Why.
        why: String,
    },
    /// The same signal twice.
    #[error("found duplicate eviction threshold for signal {0}")]
    Duplicate(String),
}

/// The Go kubelet's default hard thresholds on Linux (`DefaultEvictionHard`):
/// `memory.available<100Mi`, `nodefs.available<10%`, `nodefs.inodesFree<5%`,
/// `imagefs.available<15%`, `imagefs.inodesFree<5%`.
pub fn default_thresholds() -> Vec<Threshold> {
    parse_thresholds(&[
        "memory.available<100Mi".into(),
        "nodefs.available<10%".into(),
        "nodefs.inodesFree<5%".into(),
        "imagefs.available<15%".into(),
        "imagefs.inodesFree<5%".into(),
    ])
    .expect("default thresholds parse")
}

/// Parses `signal<value` entries (the form `--eviction-hard` takes; `evictionHard` map entries
/// are turned into it by the config loader). An empty list gives [`default_thresholds`]; a
/// non-empty one replaces the defaults entirely, as in the Go kubelet (signals not listed are
/// not watched). Thresholds of `0` or `0%` are dropped (they can never be crossed).
///
/// Errors: [`ThresholdError`].
pub fn parse_thresholds(entries: &[String]) -> Result<Vec<Threshold>, ThresholdError> {
    if entries.is_empty() {
        return Ok(default_thresholds());
    }
    let mut out: Vec<Threshold> = Vec::new();
    for e in entries {
        let e = e.trim();
        if e.is_empty() {
            continue;
        }
        let Some((name, value)) = e.split_once('<') else {
            return Err(ThresholdError::Syntax(e.to_string()));
        };
        let signal = Signal::parse(name.trim())
            .ok_or_else(|| ThresholdError::Signal(name.trim().to_string()))?;
        let value = value.trim();
        let v = if let Some(p) = value.strip_suffix('%') {
            let f: f64 = p.trim().parse().map_err(|_| ThresholdError::Percentage {
                signal: signal.name().into(),
                value: value.into(),
            })?;
            if !(0.0..=100.0).contains(&f) {
                return Err(ThresholdError::Percentage {
                    signal: signal.name().into(),
                    value: value.into(),
                });
            }
            ThresholdValue::Percentage(f as f32 / 100.0)
        } else {
            let q = crate::quantity::parse_value(value).map_err(|e| ThresholdError::Quantity {
                signal: signal.name().into(),
                value: value.into(),
                why: e.to_string(),
            })?;
            if q < 0 {
                return Err(ThresholdError::Quantity {
                    signal: signal.name().into(),
                    value: value.into(),
                    why: "must be non-negative".into(),
                });
            }
            ThresholdValue::Quantity(q as u64)
        };
        if out.iter().any(|t| t.signal == signal) {
            return Err(ThresholdError::Duplicate(signal.name().into()));
        }
        let noop = match v {
            ThresholdValue::Quantity(q) => q == 0,
            ThresholdValue::Percentage(p) => p == 0.0,
        };
        if !noop {
            out.push(Threshold { signal, value: v });
        }
    }
    Ok(out)
}

/// One observed signal: what is available and the capacity it is a part of (bytes, inodes or
/// PIDs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Available amount.
    pub available: u64,
    /// Capacity.
    pub capacity: u64,
}

/// Observations by signal; a signal that could not be observed is absent (and never crosses).
pub type Observations = BTreeMap<Signal, Observation>;

/// The thresholds whose signal is below them (`thresholdsMet`: threshold quantity > available).
pub fn thresholds_met(thresholds: &[Threshold], obs: &Observations) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            obs.get(&t.signal)
                .is_some_and(|o| t.quantity(o.capacity) > o.available)
        })
        .copied()
        .collect()
}

/// Node conditions kept up for the pressure transition period (`evictionPressureTransitionPeriod`,
/// default 5 min): a condition stays true until it has not been observed for that long, so a
/// node does not oscillate (`nodeConditionsObservedSince`).
#[derive(Debug, Default, Clone)]
pub struct PressureTracker {
    last_observed: BTreeMap<NodeCondition, Instant>,
}

impl PressureTracker {
    /// Records the conditions observed `now` (from the thresholds met) and returns the
    /// conditions in force, sorted (MemoryPressure, DiskPressure, PIDPressure).
    pub fn update(
        &mut self,
        met: &[Threshold],
        now: Instant,
        transition: Duration,
    ) -> Vec<NodeCondition> {
        for t in met {
            self.last_observed.insert(t.signal.node_condition(), now);
        }
        self.last_observed
            .retain(|_, at| now.saturating_duration_since(*at) < transition || *at == now);
        self.last_observed.keys().copied().collect()
    }
}

/// The order the Go kubelet reclaims in (`byEvictionPriority`): memory first, then the others
/// as configured. Returns the first threshold met, which decides the resource to reclaim.
pub fn threshold_to_reclaim(met: &[Threshold]) -> Option<Threshold> {
    met.iter()
        .find(|t| t.signal == Signal::MemoryAvailable)
        .or_else(|| met.first())
        .copied()
}

/// The amount of `signal` reserved from allocatable by a hard threshold for `capacity`
/// (`GetNodeAllocatableReservation`: only `memory.available` and `nodefs.available` count).
pub fn allocatable_reservation(thresholds: &[Threshold], signal: Signal, capacity: u64) -> u64 {
    thresholds
        .iter()
        .find(|t| t.signal == signal)
        .map(|t| t.quantity(capacity))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_go_forms_and_replaces_the_defaults() {
        let t = parse_thresholds(&[
            "memory.available<200Mi".into(),
            "nodefs.available<12%".into(),
        ])
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].value, ThresholdValue::Quantity(200 << 20));
        assert_eq!(t[1].value, ThresholdValue::Percentage(0.12));
        // 10% of a capacity computed through f32 as the Go kubelet does
        let ten = parse_thresholds(&["nodefs.available<10%".into()]).unwrap()[0];
        assert_eq!(ten.quantity(1_000_000_000), 100_000_001);
        assert_eq!(default_thresholds().len(), 5);
        assert!(parse_thresholds(&[]).unwrap().len() == 5);
        // zero thresholds switch a signal off
        assert!(
            parse_thresholds(&["memory.available<0".into(), "nodefs.available<0%".into()])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn refuses_bad_entries_with_go_messages() {
        assert_eq!(
            parse_thresholds(&["memory.free<1Gi".into()])
                .unwrap_err()
                .to_string(),
            "unsupported eviction signal memory.free"
        );
        assert!(matches!(
            parse_thresholds(&["nodefs.available<120%".into()]),
            Err(ThresholdError::Percentage { .. })
        ));
        assert!(matches!(
            parse_thresholds(&["nodefs.available>1Gi".into()]),
            Err(ThresholdError::Syntax(_))
        ));
        assert!(matches!(
            parse_thresholds(&["memory.available<1Gi".into(), "memory.available<2Gi".into()]),
            Err(ThresholdError::Duplicate(_))
        ));
        assert!(matches!(
            parse_thresholds(&["memory.available<lots".into()]),
            Err(ThresholdError::Quantity { .. })
        ));
    }

    #[test]
    fn met_when_available_is_below_the_quantity() {
        let t = parse_thresholds(&[
            "nodefs.available<10%".into(),
            "memory.available<100Mi".into(),
        ])
        .unwrap();
        let mut obs = Observations::new();
        obs.insert(
            Signal::NodeFsAvailable,
            Observation {
                available: 50,
                capacity: 1000,
            },
        );
        obs.insert(
            Signal::MemoryAvailable,
            Observation {
                available: 1 << 30,
                capacity: 4 << 30,
            },
        );
        let met = thresholds_met(&t, &obs);
        assert_eq!(met.len(), 1);
        assert_eq!(met[0].signal, Signal::NodeFsAvailable);
        obs.insert(
            Signal::MemoryAvailable,
            Observation {
                available: 10 << 20,
                capacity: 4 << 30,
            },
        );
        let met = thresholds_met(&t, &obs);
        assert_eq!(
            threshold_to_reclaim(&met).unwrap().signal,
            Signal::MemoryAvailable
        );
        // an unobserved signal never crosses
        assert!(thresholds_met(&t, &Observations::new()).is_empty());
    }

    #[test]
    fn conditions_stay_for_the_transition_period() {
        let t = parse_thresholds(&["nodefs.available<10%".into()]).unwrap();
        let mut p = PressureTracker::default();
        let t0 = Instant::now();
        let period = Duration::from_secs(30);
        assert_eq!(p.update(&t, t0, period), vec![NodeCondition::DiskPressure]);
        assert_eq!(
            p.update(&[], t0 + Duration::from_secs(20), period),
            vec![NodeCondition::DiskPressure]
        );
        assert!(p
            .update(&[], t0 + Duration::from_secs(31), period)
            .is_empty());
        // a zero period clears at once
        let mut p = PressureTracker::default();
        p.update(&t, t0, Duration::ZERO);
        assert!(p
            .update(&[], t0 + Duration::from_millis(1), Duration::ZERO)
            .is_empty());
    }

    #[test]
    fn allocatable_reservation_uses_capacity_for_percentages() {
        let t = default_thresholds();
        assert_eq!(
            allocatable_reservation(&t, Signal::MemoryAvailable, 8 << 30),
            100 << 20
        );
        assert_eq!(
            allocatable_reservation(&t, Signal::NodeFsAvailable, 1000),
            100
        );
        assert_eq!(
            allocatable_reservation(&[], Signal::NodeFsAvailable, 1000),
            0
        );
    }
}
