//! deckhand-scheduler: a small scheduler with kube-scheduler's semantics (k/k `pkg/scheduler`,
//! v1.36.3), for the pods whose `spec.schedulerName` is its name.
//!
//! The rooms are kube-scheduler's, by the same names:
//!
//! | concern | kube-scheduler | here |
//! |---|---|---|
//! | requests of pods, allocatable of nodes | `framework/types.go`, `component-helpers/resource` | [`resources`] |
//! | node + pods aggregate, host ports | `framework.NodeInfo`, `HostPortInfo` | [`nodeinfo`] |
//! | nodes and bound/assumed pods | `backend/cache` | [`cache`] |
//! | node selector and node affinity | `component-helpers/.../nodeaffinity` | [`affinity`] |
//! | taints and tolerations | `v1.Toleration.ToleratesTaint` | [`taints`] |
//! | filter plugins (pure) | `framework/plugins/{nodeunschedulable,nodename,tainttoleration,nodeaffinity,nodeports,noderesources}` | [`filters`] |
//! | score plugins (pure) | `noderesources` least-allocated and balanced, `nodeaffinity`, `tainttoleration` | [`scores`] |
//! | one attempt: filter, score, select, the failure message | `schedule_one.go`, `FitError` | [`schedule_one`] |
//! | topology spread: filter, score, system defaults | `podtopologyspread`, `helper/spread.go` | [`topology_spread`] |
//! | pod affinity and anti-affinity: filter, score | `interpodaffinity` | [`interpod_affinity`] |
//! | Services', controllers' selectors, Namespaces' labels | the plugins' listers | [`listers`] |
//! | preemption: victims, PDBs, node choice, nominated pods | `defaultpreemption`, `framework/preemption`, `PodNominator` | [`preemption`] |
//! | active / back-off / unschedulable queue | `backend/queue` | [`queue`] |
//! | events.k8s.io events | `client-go/tools/events` | [`events`] |
//! | Lease-based leader election | `client-go/tools/leaderelection` | [`leader`] |
//! | claims, volumes, classes and what the scheduler assumed of them | `volumebinding` assume caches, `component-helpers/storage/volume` | [`storage`] |
//! | VolumeBinding: PreFilter, Filter, Reserve, PreBind | `volumebinding` (`volume_binding.go`, `binder.go`) | [`volumebinding`] |
//! | VolumeRestrictions, VolumeZone | `volumerestrictions`, `volumezone` | [`volume_restrictions`], [`volume_zone`] |
//! | the volume plugins together, their queueing hints | `EventsToRegister` | [`volumes`] |
//! | watches, the scheduling loop, binding, status | `scheduler.go`, `eventhandlers.go`, `DefaultBinder` | [`runner`] |
//!
//! Filters and scores are pure functions over a snapshot of the cache; the loop around them is
//! thin. Not implemented (kube-scheduler defaults that are): image locality, NodeVolumeLimits,
//! storage capacity, dynamic resources, extenders, multiple profiles.

pub mod affinity;
pub mod cache;
pub mod events;
pub mod filters;
pub mod interpod_affinity;
pub mod leader;
pub mod listers;
pub mod nodeinfo;
pub mod preemption;
pub mod queue;
pub mod resources;
pub mod runner;
pub mod schedule_one;
pub mod scores;
pub mod storage;
pub mod taints;
pub mod topology_spread;
pub mod volume_restrictions;
pub mod volume_zone;
pub mod volumebinding;
pub mod volumes;

/// kube-scheduler's default name (`v1.DefaultSchedulerName`), the `schedulerName` the API server
/// defaults pods to.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
