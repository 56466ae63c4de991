//! The `deckhand` node agent: loads the flags and the KubeletConfiguration, sets up logging,
//! runs the `cri-cleanup` subcommand or hands over to [`deckhand::kubelet::Kubelet`] until
//! SIGTERM or SIGINT. Pods keep running when deckhand stops; the next start adopts them.

use anyhow::{Context, Result};
use deckhand::config::{Command, Loaded};
use deckhand::cri::CriClient;
use deckhand::kubelet::Kubelet;
use tokio_util::sync::CancellationToken;

/// Logs to stderr as text, or, when stderr is the journal (`$JOURNAL_STREAM`, i.e. deckhand runs
/// as a systemd service), as structured journal entries: each span field becomes a journal field
/// (`F_POD_NAMESPACE`, `F_POD_NAME`, `F_POD_UID`, ...), so `journalctl -u deckhand F_POD_NAME=web`
/// works. `--logging-format=json` (`logging.format: json`) writes one JSON object a line to
/// stderr instead, journal or not, as the Go kubelet's JSON format does.
/// `directives` (RUST_LOG syntax) with kube's per-request failure lines switched off, unless
/// they name kube_client themselves: its HTTP trace layer logs every failed API request at ERROR
/// ("failed with error client error (Connect)"), about 400 lines in a one-minute API server
/// outage, while deckhand logs each failure once, with what it was doing, where it happens.
fn with_quiet_api_client(directives: &str) -> String {
    if directives.contains("kube_client") {
        directives.to_string()
    } else {
        format!("{directives},kube_client::client::builder=off")
    }
}

fn init_tracing(verbosity: u8, format: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = match verbosity {
        0 | 1 => "info",
        2 | 3 => "debug",
        _ => "trace",
    };
    let directives = std::env::var("RUST_LOG")
        .unwrap_or_else(|_| format!("{default},kube=warn,tower=warn,hyper=warn,h2=warn"));
    let filter = tracing_subscriber::EnvFilter::new(with_quiet_api_client(&directives));
    if format == "json" {
        tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
        return;
    }
    if deckhand::systemd::stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(journald) => {
                tracing_subscriber::registry()
                    .with(filter)
                    .with(journald.with_syslog_identifier("deckhand".into()))
                    .init();
                return;
            }
            Err(e) => eprintln!("journald unavailable ({e}); logging text to stderr"),
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

/// Stops and removes every sandbox the runtime holds for Kubernetes pods.
async fn cri_cleanup(cri: &CriClient) -> Result<()> {
    let sandboxes = cri
        .list_pod_sandboxes(&[])
        .await
        .context("listing pod sandboxes")?;
    for s in &sandboxes {
        for c in cri
            .list_containers(&[])
            .await
            .context("listing containers")?
            .into_iter()
            .filter(|c| c.pod_sandbox_id == s.id)
        {
            let _ = cri.stop_container(&c.id, 0).await;
        }
        cri.stop_pod_sandbox(&s.id)
            .await
            .with_context(|| format!("stopping sandbox {}", s.id))?;
        cri.remove_pod_sandbox(&s.id)
            .await
            .with_context(|| format!("removing sandbox {}", s.id))?;
    }
    println!("removed {} pod sandboxes", sandboxes.len());
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// How long an idle thread of tokio's blocking pool waits for work before it exits (tokio's
/// default is 10 s). The pool wakes its idle threads in turn, so with the default a burst of
/// blocking work (100 `kubectl logs -f` at once) left ~30 threads that never exited: each got a
/// file read of the periodic loops (about 3 a second on an idle node) before its 10 s were up.
/// With 1 s the pool shrinks back to a few threads within seconds of a burst.
const BLOCKING_THREAD_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

/// The async runtime: `DECKHAND_RUNTIME_THREADS` worker threads (`0` or `1`: everything on the
/// main thread, tokio's current-thread runtime), by default as many as there are CPUs; blocking
/// file and mount work goes to tokio's blocking pool either way
/// ([`BLOCKING_THREAD_KEEP_ALIVE`]). Like GOMAXPROCS for the Go kubelet, a knob for small nodes.
fn main() -> Result<()> {
    deckhand::pod::housekeeping::limit_heap_arenas();
    deckhand::abort_on_panic();
    let threads: Option<usize> = std::env::var("DECKHAND_RUNTIME_THREADS")
        .ok()
        .and_then(|v| v.parse().ok());
    let rt = match threads {
        Some(0 | 1) => tokio::runtime::Builder::new_current_thread()
            .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
            .enable_all()
            .build(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
            .enable_all()
            .build(),
    }
    .context("starting the async runtime")?;
    rt.block_on(run())
}

async fn run() -> Result<()> {
    let Loaded {
        flags,
        kubelet,
        warnings,
    } = match deckhand::config::load() {
        Ok(x) => x,
        Err(e) => {
            // Before logging is set up: plain stderr (the journal takes it too).
            eprintln!("deckhand: {e}");
            std::process::exit(1);
        }
    };
    init_tracing(kubelet.logging.verbosity, &kubelet.logging.format);
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let cri = CriClient::new(&kubelet.container_runtime_endpoint)
        .context("container runtime endpoint")?;

    if let Some(Command::CriCleanup) = flags.command {
        return cri_cleanup(&cri).await;
    }

    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            stop.cancel();
        });
    }
    Kubelet::new(flags, kubelet).run(cri, stop).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_quiet_api_client;

    #[test]
    fn kube_request_failure_lines_are_off_unless_asked_for() {
        for (given, want) in [
            ("info", "info,kube_client::client::builder=off"),
            (
                "debug,kube=warn",
                "debug,kube=warn,kube_client::client::builder=off",
            ),
            ("info,kube_client=debug", "info,kube_client=debug"),
        ] {
            assert_eq!(with_quiet_api_client(given), want);
        }
    }
}
