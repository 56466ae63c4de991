//! Container exits as containerd's event stream reports them, before its CRI plugin does.
//!
//! containerd publishes `/tasks/exit` (exit status and time) within a few milliseconds of the
//! exit, but its CRI plugin reports the container `CONTAINER_EXITED` only 50–200 ms later, once
//! it has drained the container's output and deleted the task (runc delete). The PLEG records
//! each exit here as it arrives; [`crate::pod::runtime::PodRuntimeStatus::observe`] lays the
//! record over a container that CRI still shows running ([`overlay`]), so the pod worker decides
//! and writes the status at once and CRI confirms it afterwards. A record goes when CRI shows the
//! container exited, or when the container is gone from the runtime.
//!
//! The Go kubelet's evented PLEG gets the same facts from CRI's `GetContainerEvents` (containerd
//! 1.7+), after the CRI plugin's update; containerd 1.6 has no CRI events.

use crate::cri::api;
use crate::heap::ShrinkingMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
// tokio's clock, so a record's age follows paused time in the component tests (it is the real
// clock otherwise, and outside a runtime)
use tokio::time::Instant;

/// How long a record whose container the runtime no longer lists is kept (a relist may have
/// been taken before the container was created).
pub const ORPHAN_RECORD_TTL: Duration = Duration::from_secs(60);
/// At most this many records are kept (a bound, far above any node's container count).
pub const MAX_RECORDS: usize = 4096;
/// How long an exit by SIGKILL (status 137) with no OOM event yet is held back: containerd
/// publishes `/tasks/oom` and `/tasks/exit` from separate watchers, and the OOM event of a
/// container the kernel killed can come a few milliseconds after its exit. Reporting the exit
/// before then would write reason `Error` where the CRI plugin (and the Go kubelet reading it)
/// says `OOMKilled`; a pod that is then terminal keeps the wrong reason.
pub const OOM_GRACE: Duration = Duration::from_millis(100);
/// The exit status of a process killed by SIGKILL, as containerd reports it (128 + 9).
pub const SIGKILL_EXIT_STATUS: i32 = 137;

/// What containerd's events said about one container's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedExit {
    /// `(exit status, exited_at in nanoseconds since the epoch)` from `/tasks/exit`; `None` while
    /// only an OOM event was seen.
    pub exit: Option<(i32, i64)>,
    /// A `/tasks/oom` event was seen for the container (the CRI plugin then reports the reason
    /// `OOMKilled`).
    pub oom: bool,
}

/// The exits recorded from containerd's event stream, by container id. Cheap to clone (one
/// shared map).
#[derive(Clone, Default)]
pub struct RecordedExits {
    inner: Arc<Mutex<ShrinkingMap<String, (RecordedExit, Instant)>>>,
}

impl RecordedExits {
    /// Records the exit of container `id` with `status` at `exited_at_ns` (nanoseconds since
    /// the epoch).
    pub fn record_exit(&self, id: &str, status: i32, exited_at_ns: i64) {
        self.update(id, |r| r.exit = Some((status, exited_at_ns)));
    }

    /// Records that container `id` ran out of memory.
    pub fn record_oom(&self, id: &str) {
        self.update(id, |r| r.oom = true);
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut RecordedExit)) {
        let mut m = self.inner.lock().unwrap();
        if m.len() >= MAX_RECORDS && !m.contains_key(id) {
            // the oldest goes: the runtime confirms every exit in time anyway
            if let Some(oldest) = m
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
            {
                m.remove(&oldest);
            }
        }
        let e = m.get_or_insert_with(id.to_string(), || {
            (
                RecordedExit {
                    exit: None,
                    oom: false,
                },
                Instant::now(),
            )
        });
        f(&mut e.0);
    }

    /// The record of container `id`, if any.
    pub fn get(&self, id: &str) -> Option<RecordedExit> {
        self.inner.lock().unwrap().get(id).map(|(r, _)| *r)
    }

    /// The record of container `id` and how long ago its first event arrived.
    pub fn get_with_age(&self, id: &str) -> Option<(RecordedExit, Duration)> {
        self.inner
            .lock()
            .unwrap()
            .get(id)
            .map(|(r, at)| (*r, at.elapsed()))
    }

    /// Forgets container `id` (CRI shows it exited, or it was removed).
    pub fn forget(&self, id: &str) {
        let mut g = self.inner.lock().unwrap();
        g.remove(id);
    }

    /// After a relist: forgets the records of containers CRI shows exited (`exited(id)`) and of
    /// those it no longer lists (`listed(id)` false) once they are older than
    /// [`ORPHAN_RECORD_TTL`].
    pub fn prune(&self, listed: impl Fn(&str) -> bool, exited: impl Fn(&str) -> bool) {
        let now = Instant::now();
        let mut g = self.inner.lock().unwrap();
        g.retain(|id, (_, at)| {
            if listed(id) {
                !exited(id)
            } else {
                now.duration_since(*at) < ORPHAN_RECORD_TTL
            }
        });
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The reason containerd's CRI plugin gives an exited container (containerd
/// `pkg/cri/server/container_status.go`): `OOMKilled` after an OOM event, else `Completed` for
/// exit status 0 and `Error` for any other.
pub fn exit_reason(exit_code: i32, oom: bool) -> &'static str {
    if oom {
        "OOMKilled"
    } else if exit_code == 0 {
        "Completed"
    } else {
        "Error"
    }
}

/// Whether the exit in `record`, first seen `age` ago, is a SIGKILL whose OOM event may still
/// come ([`OOM_GRACE`]): it is not reported yet.
pub fn awaiting_oom(record: &RecordedExit, age: Duration) -> bool {
    matches!(record.exit, Some((SIGKILL_EXIT_STATUS, _))) && !record.oom && age < OOM_GRACE
}

/// Lays `record` over a CRI container status that does not show the exit yet: state
/// `CONTAINER_EXITED`, the exit code, `finished_at` and the reason, as the CRI plugin will
/// report them. A status that already shows the container exited, or a record without an exit
/// (an OOM event alone), leaves `status` as it is. Returns whether it changed `status`.
pub fn overlay(status: &mut api::ContainerStatus, record: &RecordedExit) -> bool {
    let Some((code, at)) = record.exit else {
        return false;
    };
    if status.state == api::ContainerState::ContainerExited as i32 {
        return false;
    }
    status.state = api::ContainerState::ContainerExited as i32;
    status.exit_code = code;
    status.finished_at = at;
    status.reason = exit_reason(code, record.oom).to_string();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> api::ContainerStatus {
        api::ContainerStatus {
            id: "c1".into(),
            state: api::ContainerState::ContainerRunning as i32,
            started_at: 5,
            ..Default::default()
        }
    }

    #[test]
    fn a_sigkill_exit_waits_a_moment_for_its_oom_event() {
        let rec = |code: i32, oom: bool| RecordedExit {
            exit: Some((code, 1)),
            oom,
        };
        let (early, late) = (Duration::from_millis(5), OOM_GRACE);
        let cases = [
            (
                "SIGKILL, no OOM event yet, just now: held",
                rec(137, false),
                early,
                true,
            ),
            (
                "SIGKILL, no OOM event within the grace: reported (Error)",
                rec(137, false),
                late,
                false,
            ),
            (
                "SIGKILL after an OOM event: reported at once (OOMKilled)",
                rec(137, true),
                early,
                false,
            ),
            (
                "any other status: reported at once",
                rec(1, false),
                early,
                false,
            ),
            ("exit 0: reported at once", rec(0, false), early, false),
            (
                "an OOM event alone: nothing to report anyway",
                RecordedExit {
                    exit: None,
                    oom: true,
                },
                early,
                false,
            ),
        ];
        for (name, r, age, held) in cases {
            assert_eq!(awaiting_oom(&r, age), held, "{name}");
        }
    }

    #[test]
    fn overlay_reports_the_exit_as_the_cri_plugin_will() {
        // (case, record, CRI state before, changed, state after, exit code, finished_at, reason)
        type Case = (
            &'static str,
            RecordedExit,
            i32,
            bool,
            i32,
            i32,
            i64,
            &'static str,
        );
        let exited = api::ContainerState::ContainerExited as i32;
        let run = api::ContainerState::ContainerRunning as i32;
        let cases: &[Case] = &[
            (
                "exit 0 is Completed",
                RecordedExit {
                    exit: Some((0, 100)),
                    oom: false,
                },
                run,
                true,
                exited,
                0,
                100,
                "Completed",
            ),
            (
                "non-zero exit is Error",
                RecordedExit {
                    exit: Some((3, 200)),
                    oom: false,
                },
                run,
                true,
                exited,
                3,
                200,
                "Error",
            ),
            (
                "an OOM event before the exit makes it OOMKilled",
                RecordedExit {
                    exit: Some((137, 300)),
                    oom: true,
                },
                run,
                true,
                exited,
                137,
                300,
                "OOMKilled",
            ),
            (
                "an OOM event alone is no exit",
                RecordedExit {
                    exit: None,
                    oom: true,
                },
                run,
                false,
                run,
                0,
                0,
                "",
            ),
            (
                "CRI already shows the exit: its own figures stay",
                RecordedExit {
                    exit: Some((9, 999)),
                    oom: false,
                },
                exited,
                false,
                exited,
                0,
                0,
                "",
            ),
        ];
        for (name, rec, before, changed, state, code, finished, reason) in cases {
            let mut st = running();
            st.state = *before;
            assert_eq!(overlay(&mut st, rec), *changed, "{name}");
            assert_eq!(st.state, *state, "{name}");
            assert_eq!(st.exit_code, *code, "{name}");
            assert_eq!(st.finished_at, *finished, "{name}");
            assert_eq!(st.reason, *reason, "{name}");
            assert_eq!(st.started_at, 5, "{name}: the start time stays");
        }
    }

    #[test]
    fn records_merge_oom_and_exit_and_are_pruned_once_cri_confirms() {
        let r = RecordedExits::default();
        r.record_oom("a");
        r.record_exit("a", 137, 10);
        r.record_exit("b", 0, 20);
        assert_eq!(
            r.get("a"),
            Some(RecordedExit {
                exit: Some((137, 10)),
                oom: true
            })
        );
        // a: CRI shows it exited; b: still running in CRI; c: not listed but young
        r.record_exit("c", 1, 30);
        r.prune(|id| id != "c", |id| id == "a");
        assert_eq!(r.get("a"), None);
        assert!(r.get("b").is_some());
        assert!(r.get("c").is_some(), "a young unlisted record stays");
        r.forget("b");
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn the_number_of_records_is_bounded() {
        let r = RecordedExits::default();
        for i in 0..MAX_RECORDS + 10 {
            r.record_exit(&format!("c{i}"), 0, i as i64);
        }
        assert_eq!(r.len(), MAX_RECORDS);
        assert!(r.get(&format!("c{}", MAX_RECORDS + 9)).is_some());
    }
}
