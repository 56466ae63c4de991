//! The scheduler's events, as kube-scheduler records them: events.k8s.io/v1 Events with
//! `reportingController` = the scheduler name, `reportingInstance` = `<name>-<hostname>`, action
//! `Scheduling` or `Binding` (k/k `pkg/scheduler/schedule_one.go`, `client-go/tools/events`).
//! A repeat of the same (pod, type, reason, action, note) within 6 minutes updates the existing
//! Event's `series` instead of creating another (client-go keys its series without the note; we
//! keep the note in the key so that a changed failure message is visible as a new event).
//! Delivery runs in background tasks; a full queue drops events (as client-go's broadcaster does).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, Semaphore};

/// Reason `Scheduled` (Normal, action `Binding`): `Successfully assigned <ns>/<pod> to <node>`.
pub const REASON_SCHEDULED: &str = "Scheduled";
/// Reason `FailedScheduling` (Warning, action `Scheduling`).
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";
/// Action of scheduling failures.
pub const ACTION_SCHEDULING: &str = "Scheduling";
/// Action of successful bindings.
pub const ACTION_BINDING: &str = "Binding";
/// The event on a pod evicted to make room for a more important one.
pub const REASON_PREEMPTED: &str = "Preempted";
/// Its action.
pub const ACTION_PREEMPTING: &str = "Preempting";

/// How long repeats fold into one series (client-go `maxTriesPerEvent`/isomorphic window: 6 min).
const SERIES_WINDOW_SECONDS: i64 = 6 * 60;
/// Notes longer than this are cut (`validation.NoteLengthLimit`, 1 KiB) with ` ...`.
pub const NOTE_LENGTH_LIMIT: usize = 1024;
/// Events delivered at once.
const CONCURRENCY: usize = 8;

/// `truncateMessage`: cuts a message to [`NOTE_LENGTH_LIMIT`] bytes ending in ` ...`.
pub fn truncate_note(message: &str) -> String {
    if message.len() <= NOTE_LENGTH_LIMIT {
        return message.to_string();
    }
    let mut cut = NOTE_LENGTH_LIMIT - 4;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{} ...", &message[..cut])
}

struct Pending {
    regarding: ObjectReference,
    warning: bool,
    reason: &'static str,
    action: &'static str,
    note: String,
    /// When the event was recorded: its `eventTime` and name come from this, not from when a
    /// delivery task gets to it (client-go `tools/events` stamps in `Eventf`).
    at: Timestamp,
}

#[derive(Clone)]
struct Seen {
    name: String,
    count: i32,
    first: Timestamp,
}

/// A cloneable handle that queues events for delivery.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
}

fn micro_time(t: Timestamp) -> MicroTime {
    // the API server keeps microseconds
    MicroTime(Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t))
}

impl Recorder {
    /// Starts delivery for scheduler `controller` (its name) on `host`.
    pub fn start(client: kube::Client, controller: &str, host: &str) -> Self {
        let (tx, mut rx) = mpsc::channel::<Pending>(10_000);
        let controller = controller.to_string();
        let instance = format!("{controller}-{host}");
        let seen: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let slots = Arc::new(Semaphore::new(CONCURRENCY));
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let (client, controller, instance, seen) = (
                    client.clone(),
                    controller.clone(),
                    instance.clone(),
                    seen.clone(),
                );
                tokio::spawn(async move {
                    deliver(&client, &controller, &instance, &seen, p).await;
                    drop(permit);
                });
            }
        });
        Self { tx }
    }

    /// A recorder that drops everything (tools, tests).
    pub fn disabled() -> Self {
        let (tx, _rx) = mpsc::channel(1);
        Self { tx }
    }

    /// Records an event about a pod.
    pub fn pod(
        &self,
        pod: &Pod,
        warning: bool,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let regarding = ObjectReference {
            kind: Some("Pod".into()),
            api_version: Some("v1".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            ..Default::default()
        };
        let p = Pending {
            regarding,
            warning,
            reason,
            action,
            note: truncate_note(&note),
            at: Timestamp::now(),
        };
        if self.tx.try_send(p).is_err() {
            tracing::debug!(reason, "event queue full; event dropped");
        }
    }
}

async fn deliver(
    client: &kube::Client,
    controller: &str,
    instance: &str,
    seen: &Mutex<HashMap<String, Seen>>,
    p: Pending,
) {
    let now = p.at;
    let namespace = p
        .regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let key = format!(
        "{}/{}/{}/{}/{}",
        p.regarding.uid.as_deref().unwrap_or(""),
        p.warning,
        p.reason,
        p.action,
        p.note
    );
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let repeat = {
        let mut seen = seen.lock().unwrap();
        if seen.len() > 50_000 {
            seen.retain(|_, s| now.as_second() - s.first.as_second() < SERIES_WINDOW_SECONDS);
        }
        match seen.get_mut(&key) {
            Some(s) if now.as_second() - s.first.as_second() < SERIES_WINDOW_SECONDS => {
                s.count += 1;
                Some(s.clone())
            }
            _ => None,
        }
    };
    if let Some(s) = repeat {
        let patch =
            serde_json::json!({"series": {"count": s.count, "lastObservedTime": micro_time(now)}});
        match api
            .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            Err(e) => {
                tracing::debug!(error = %e, "event series update failed; creating a new event")
            }
        }
    }
    let mut ev = new_event(p, controller, instance, &namespace);
    match api.create(&PostParams::default(), &ev).await {
        Ok(_) => {
            seen.lock().unwrap().insert(
                key,
                Seen {
                    name: ev.metadata.name.take().unwrap_or_default(),
                    count: 1,
                    first: now,
                },
            );
        }
        Err(e) => {
            let reason = ev.reason.as_deref().unwrap_or_default();
            tracing::debug!(reason, error = %e, "event not recorded")
        }
    }
}

/// The Event a first occurrence of `p` is posted as in `namespace`: named `<pod>.<record time
/// in hex nanoseconds>`, `eventTime` the record time in microseconds, no series yet (client-go
/// `tools/events` `generateEvent`).
fn new_event(p: Pending, controller: &str, instance: &str, namespace: &str) -> Event {
    let name = format!(
        "{}.{:x}",
        p.regarding.name.as_deref().unwrap_or("pod"),
        p.at.as_nanosecond()
    );
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        event_time: Some(micro_time(p.at)),
        series: None::<EventSeries>,
        reporting_controller: Some(controller.to_string()),
        reporting_instance: Some(instance.to_string()),
        action: Some(p.action.to_string()),
        reason: Some(p.reason.to_string()),
        regarding: Some(p.regarding),
        note: Some(p.note),
        type_: Some(if p.warning { "Warning" } else { "Normal" }.into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_stamped_when_recorded_not_when_it_is_delivered() {
        let (tx, mut rx) = mpsc::channel(1);
        let recorder = Recorder { tx };
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        }))
        .unwrap();
        let before = Timestamp::now();
        recorder.pod(
            &pod,
            false,
            REASON_SCHEDULED,
            ACTION_BINDING,
            "assigned".into(),
        );
        let after = Timestamp::now();
        let p = rx.try_recv().unwrap();
        assert!(
            before <= p.at && p.at <= after,
            "{} not in [{before}, {after}]",
            p.at
        );

        // however late it is delivered, the Event carries the record time
        let at: Timestamp = "2026-12-06T20:00:00.123456789Z".parse().unwrap();
        let ev = new_event(Pending { at, ..p }, "sched", "sched-h", "ns");
        assert_eq!(
            ev.metadata.name.as_deref(),
            Some(format!("p.{:x}", at.as_nanosecond()).as_str())
        );
        assert_eq!(
            ev.event_time,
            Some(MicroTime("2026-12-06T20:00:00.123456Z".parse().unwrap()))
        );
        assert_eq!(ev.reporting_controller.as_deref(), Some("sched"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("sched-h"));
        assert_eq!(ev.action.as_deref(), Some(ACTION_BINDING));
        assert!(ev.series.is_none());
    }

    #[test]
    fn long_notes_are_cut_with_an_ellipsis() {
        assert_eq!(truncate_note("short"), "short");
        let long = "x".repeat(2000);
        let t = truncate_note(&long);
        assert_eq!(t.len(), NOTE_LENGTH_LIMIT);
        assert!(t.ends_with(" ..."));
    }
}
