//! Table tests of the status manager's pure decisions.

use super::*;
use serde_json::json;

fn pod(uid: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(format!("p-{uid}"));
    p.metadata.namespace = Some("ns".into());
    p
}

#[test]
fn observed_generation_follows_the_pod_and_never_goes_back() {
    let cond = |t: &str| k8s_openapi::api::core::v1::PodCondition {
        type_: t.into(),
        status: "True".into(),
        ..Default::default()
    };
    let cases: &[(&str, Option<i64>, Option<i64>, Option<i64>)] = &[
        ("first status", Some(2), None, Some(2)),
        ("spec updated", Some(3), Some(2), Some(3)),
        ("older generation seen", Some(2), Some(3), Some(3)),
        ("static pod: no generation", None, None, None),
    ];
    for (name, generation, old, want) in cases {
        let mut p = pod("u");
        p.metadata.generation = *generation;
        let old = old.map(|g| PodStatus {
            observed_generation: Some(g),
            ..Default::default()
        });
        let mut new = PodStatus {
            conditions: Some(vec![cond("Ready"), cond("example.com/gate")]),
            ..Default::default()
        };
        observe_generation(&p, old.as_ref(), &mut new);
        assert_eq!(new.observed_generation, *want, "{name}");
        let cs = new.conditions.unwrap();
        assert_eq!(cs[0].observed_generation, *generation, "{name}: Ready");
        assert_eq!(cs[1].observed_generation, None, "{name}: not the kubelet's");
    }
}

fn status(phase: &str) -> PodStatus {
    PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    }
}

/// The newest status per pod wins while nothing was written yet (the Go status manager's
/// coalescing); different pods queue side by side.
#[tokio::test]
async fn queued_statuses_coalesce_per_pod_uid() {
    let client = kube::Client::new(
        tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
                "no server in this test",
            ))
        }),
        "default",
    );
    let m = StatusManager::new(client);
    m.queue(&pod("a"), &status("Pending"));
    m.queue(&pod("a"), &status("Running"));
    m.queue(&pod("b"), &status("Pending"));
    assert_eq!(m.pending_len(), 2);
    let pending = m.inner.pending.lock().unwrap().clone();
    assert_eq!(pending["a"].1.phase.as_deref(), Some("Running"));
    m.forget("a");
    assert_eq!(m.pending_len(), 1);
}

/// A status generated from an older pod snapshot keeps the start time and the transition
/// times of unchanged conditions of the status before it.
#[test]
fn a_newer_status_keeps_start_time_and_unchanged_transition_times() {
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let t = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
    let cond = |type_: &str, status: &str, at: i64| PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(t(at)),
        ..Default::default()
    };
    let old = PodStatus {
        start_time: Some(t(100)),
        conditions: Some(vec![
            cond("PodScheduled", "True", 90),
            cond("PodReadyToStartContainers", "True", 101),
            cond("Ready", "False", 100),
        ]),
        ..Default::default()
    };
    let mut new = PodStatus {
        start_time: Some(t(109)),
        conditions: Some(vec![
            cond("PodScheduled", "True", 109),
            cond("PodReadyToStartContainers", "True", 109),
            cond("Ready", "True", 109),
        ]),
        ..Default::default()
    };
    carry_over(&old, &mut new);
    assert_eq!(new.start_time, Some(t(100)));
    let at = |n: &PodStatus, ty: &str| {
        n.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == ty)
            .unwrap()
            .last_transition_time
            .clone()
    };
    assert_eq!(at(&new, "PodScheduled"), Some(t(90)));
    assert_eq!(at(&new, "PodReadyToStartContainers"), Some(t(101)));
    assert_eq!(
        at(&new, "Ready"),
        Some(t(109)),
        "a changed condition gets its new time"
    );
    // nothing to carry from a status without a start time
    let mut fresh = PodStatus {
        start_time: Some(t(5)),
        ..Default::default()
    };
    carry_over(&PodStatus::default(), &mut fresh);
    assert_eq!(fresh.start_time, Some(t(5)));
}

#[test]
fn restart_counts_never_go_down() {
    use k8s_openapi::api::core::v1::ContainerStatus;
    let cs = |name: &str, n: i32| ContainerStatus {
        name: name.into(),
        restart_count: n,
        ..Default::default()
    };
    // (old count, new count, expected)
    for (o, n, want) in [(3, 0, 3), (3, 4, 4), (0, 0, 0), (2, 2, 2)] {
        let old = PodStatus {
            container_statuses: Some(vec![cs("main", o), cs("side", 7)]),
            init_container_statuses: Some(vec![cs("init", o)]),
            ..Default::default()
        };
        let mut new = PodStatus {
            container_statuses: Some(vec![cs("main", n), cs("other", 1)]),
            init_container_statuses: Some(vec![cs("init", n)]),
            ..Default::default()
        };
        carry_over(&old, &mut new);
        let got = new.container_statuses.as_ref().unwrap();
        assert_eq!(got[0].restart_count, want, "main {o} -> {n}");
        assert_eq!(
            got[1].restart_count, 1,
            "a container the old status lacks keeps its own"
        );
        assert_eq!(
            new.init_container_statuses.as_ref().unwrap()[0].restart_count,
            want,
            "init {o} -> {n}"
        );
    }
}

/// Standalone: nothing is queued, the status is kept at once.
#[test]
fn standalone_keeps_statuses_locally() {
    let m = StatusManager::standalone();
    m.queue(&pod("a"), &status("Running"));
    assert_eq!(m.pending_len(), 0);
    assert_eq!(
        m.last_written("a").and_then(|s| s.phase),
        Some("Running".into())
    );
}

/// `latest` for a static pod reads its mirror pod's status while the periodic mirror pass runs:
/// the two take the same locks, and must not wait for each other (they did: `latest` held
/// `last_written` while taking `mirrors`, the mirror pass the other way round).
#[test]
fn reading_a_static_pods_status_during_the_mirror_pass_does_not_deadlock() {
    let m = StatusManager::standalone();
    m.mirror_uids()
        .lock()
        .unwrap()
        .insert("static".into(), ("mirror".into(), status("Running"), None));
    m.queue(&pod("mirror"), &status("Running"));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader = {
        let (m, done) = (m.clone(), done_tx.clone());
        std::thread::spawn(move || {
            for _ in 0..200_000 {
                assert!(m.latest("static").is_some());
            }
            let _ = done.send(());
        })
    };
    let reconciler = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for _ in 0..200_000 {
            rt.block_on(m.reconcile_mirrors());
        }
        let _ = done_tx.send(());
    });
    for _ in 0..2 {
        done_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("latest and reconcile_mirrors deadlocked");
    }
    reader.join().unwrap();
    reconciler.join().unwrap();
}

/// The periodic mirror pass picks a static pod only when its mirror pod carries a newer,
/// different status than our last write on it.
#[test]
fn mirror_reconcile_picks_static_pods_whose_mirror_status_was_changed() {
    let ours = status("Running");
    let changed = status("Failed");
    let mirrors: HashMap<String, (String, PodStatus, Option<String>)> = [
        // changed by someone else after our write
        ("etcd", ("m-etcd", changed.clone(), Some("120"))),
        // our own write, seen by the watch
        ("apiserver", ("m-api", ours.clone(), Some("100"))),
        // the watch lags behind our write
        ("scheduler", ("m-sched", changed.clone(), Some("90"))),
        // nothing written on this mirror yet: left to the pod worker
        ("cm", ("m-cm", changed.clone(), Some("120"))),
    ]
    .into_iter()
    .map(|(k, (m, st, rv))| (k.to_string(), (m.to_string(), st, rv.map(String::from))))
    .collect();
    let written: HashMap<String, PodStatus> = ["m-etcd", "m-api", "m-sched"]
        .into_iter()
        .map(|m| (m.to_string(), ours.clone()))
        .collect();
    let rvs: HashMap<String, u64> = ["m-etcd", "m-api", "m-sched"]
        .into_iter()
        .map(|m| (m.to_string(), 100))
        .collect();
    // "proxy" is a static pod with no mirror pod yet
    let statics = ["etcd", "apiserver", "scheduler", "cm", "proxy"];
    assert_eq!(
        mirrors_to_reconcile(statics, &mirrors, &written, &rvs),
        vec!["etcd".to_string()]
    );
}

#[test]
fn reconcile_only_a_newer_api_copy_that_differs() {
    let ours = status("Running");
    let changed = status("Failed");
    // (api status, api rv, our rv) → reconcile?
    let cases: [(&PodStatus, Option<&str>, Option<u64>, bool); 6] = [
        (&changed, Some("120"), Some(100), true), // someone changed it after our write
        (&ours, Some("120"), Some(100), false),   // newer but the same status
        (&changed, Some("100"), Some(100), false), // our own write, seen by the watch
        (&changed, Some("90"), Some(100), false), // the watch lags behind our write
        (&changed, None, Some(100), false),       // unknown resource version
        (&changed, Some("120"), None, false),     // nothing written yet by us
    ];
    for (api, api_rv, our_rv, want) in cases {
        assert_eq!(
            needs_reconcile(api, api_rv, &ours, our_rv),
            want,
            "{api_rv:?} {our_rv:?}"
        );
    }
    assert!(!needs_reconcile(&changed, Some("abc"), &ours, Some(1)));
    // a field only the API copy has, or a condition another component owns, is not ours
    let mut extra = ours.clone();
    extra.nominated_node_name = Some("n2".into());
    extra.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        ..Default::default()
    }]);
    assert!(!needs_reconcile(&extra, Some("120"), &ours, Some(100)));
}

#[test]
fn reconciling_keeps_the_conditions_other_components_own() {
    let cond = |t: &str, s: &str| k8s_openapi::api::core::v1::PodCondition {
        type_: t.into(),
        status: s.into(),
        ..Default::default()
    };
    let mut api = status("Failed");
    api.conditions = Some(vec![
        cond("DisruptionTarget", "True"),
        cond("Ready", "False"),
    ]);
    let mut ours = status("Running");
    ours.conditions = Some(vec![cond("Ready", "True")]);
    let out = with_foreign_conditions(&ours, &api);
    assert_eq!(out.phase.as_deref(), Some("Running"));
    let types: Vec<(String, String)> = out
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        types,
        [
            ("DisruptionTarget".into(), "True".into()),
            ("Ready".into(), "True".into())
        ]
    );
}

#[test]
fn merge_patch_removes_fields_that_went_away() {
    let old = json!({"phase": "Pending", "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    let new = json!({"phase": "Running", "containerStatuses": [{"name": "a", "state": {"running": {"startedAt": "t"}}}]});
    let d = merge_patch_diff(&old, &new).unwrap();
    assert_eq!(d["phase"], "Running");
    assert_eq!(
        d["containerStatuses"][0]["state"]["running"]["startedAt"],
        "t"
    );
    assert!(
        d["containerStatuses"][0]["state"].get("waiting").is_none(),
        "arrays are replaced whole"
    );
    let old = json!({"a": {"b": 1, "c": 2}});
    let new = json!({"a": {"b": 1}});
    assert_eq!(
        merge_patch_diff(&old, &new).unwrap(),
        json!({"a": {"c": null}})
    );
    assert_eq!(merge_patch_diff(&new, &new), None);
}

/// A fake API server whose every status PATCH takes `delay` (tokio time), then succeeds (or
/// fails, with `fail`); it records the most PATCHes it had in flight at once and the pod names
/// it was sent.
fn slow_api(
    delay: Duration,
    fail: bool,
) -> (
    kube::Client,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<Mutex<Vec<String>>>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let (most2, sent2) = (most.clone(), sent.clone());
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (in_flight, most, sent) = (in_flight.clone(), most2.clone(), sent2.clone());
        async move {
            let name = req.uri().path().split('/').nth(6).unwrap_or("").to_string();
            sent.lock().unwrap().push(name.clone());
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            if fail {
                return Err::<http::Response<http_body_util::Full<bytes::Bytes>>, tower::BoxError>(
                    "connection reset (fake)".into(),
                );
            }
            let body = json!({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"}});
            Ok(http::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    body.to_string(),
                )))
                .unwrap())
        }
    });
    (kube::Client::new(svc, "default"), most, sent)
}

/// Statuses of different pods are written side by side, up to [`WRITE_CONCURRENCY`] at once: with
/// 30 pods starting together, a serial writer made the last pod's Running status wait behind
/// every other pod's writes (about 450 ms of the 30-at-once benchmark, issue 15).
#[tokio::test(start_paused = true)]
async fn statuses_of_different_pods_are_written_side_by_side() {
    let (client, most, _) = slow_api(Duration::from_millis(100), false);
    let m = StatusManager::new(client);
    for i in 0..16 {
        m.queue(&pod(&format!("u{i}")), &status("Running"));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let writer = {
        let (m, cancel) = (m.clone(), cancel.clone());
        tokio::spawn(async move { m.run(cancel).await })
    };
    let t0 = tokio::time::Instant::now();
    while (0..16).any(|i| m.last_written(&format!("u{i}")).is_none()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = t0.elapsed();
    cancel.cancel();
    writer.await.unwrap();
    assert_eq!(
        most.load(std::sync::atomic::Ordering::SeqCst),
        WRITE_CONCURRENCY
    );
    // 16 writes of 100 ms, 8 at a time: two rounds (serially it took 1.6 s)
    assert!(took <= Duration::from_millis(250), "took {took:?}");
}

/// After a failed write the writer starts no new one in that batch: what was not sent stays
/// queued for the retry (an API server that is away is not sent every pod's status on each
/// attempt).
#[tokio::test(start_paused = true)]
async fn after_a_failed_write_the_rest_of_the_batch_waits_for_the_retry() {
    let (client, _, sent) = slow_api(Duration::from_millis(100), true);
    let m = StatusManager::new(client);
    // one more pod than the writer sends at once: the last is never started in this batch
    for i in 0..=WRITE_CONCURRENCY {
        m.queue(&pod(&format!("u{i}")), &status("Running"));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let writer = {
        let (m, cancel) = (m.clone(), cancel.clone());
        tokio::spawn(async move { m.run(cancel).await })
    };
    // inside the first retry wait
    tokio::time::sleep(Duration::from_millis(100) + WRITE_RETRY_INITIAL / 2).await;
    let first_batch = sent.lock().unwrap().len();
    let pending = m.pending_len();
    cancel.cancel();
    writer.await.unwrap();
    // the first WRITE_CONCURRENCY were sent together and failed; the last was never started
    assert_eq!(first_batch, WRITE_CONCURRENCY);
    // all are still queued for the retry
    assert_eq!(pending, WRITE_CONCURRENCY + 1);
    assert!((0..=WRITE_CONCURRENCY).all(|i| m.last_written(&format!("u{i}")).is_none()));
}
