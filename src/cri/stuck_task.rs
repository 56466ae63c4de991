//! Containers whose task containerd left half-started. When the client of a `StartContainer`
//! goes away in the middle (deckhand killed with SIGKILL, as `hack/chaos.sh kill` does),
//! containerd 1.6's CRI plugin can be left with the container's task in state CREATED: `runc
//! create` ran, `runc start` never did, and runc's init process waits for good inside the pod
//! cgroup. CRI then reports the container EXITED, so `StopContainer` does nothing, while
//! `RemoveContainer` (and `RemovePodSandbox`) fail with "cannot delete running task" and the
//! pod cgroup stays busy: the pod can never be cleaned up.
//!
//! CRI has no call that reaches such a task, so deckhand asks containerd's own task service
//! (the same socket, namespace `k8s.io`) to kill it and delete it, then removes the container
//! through CRI again. Runtimes that do not serve containerd's task API answer Unimplemented and
//! nothing changes.

use containerd_client::services::v1::tasks_client::TasksClient;
use containerd_client::services::v1::{DeleteTaskRequest, GetRequest, KillRequest};
use containerd_client::types::v1::Status as TaskStatus;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::Request;

/// Whether a failed `RemoveContainer` or `RemovePodSandbox` is containerd refusing to delete a
/// container whose task still exists (gRPC FAILED_PRECONDITION, "cannot delete running task").
pub fn is_stuck_task(code: tonic::Code, message: &str) -> bool {
    code == tonic::Code::FailedPrecondition && message.contains("cannot delete running task")
}

/// How long [`kill_task`] waits for the killed task to stop before deleting it.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// Kills container `id`'s task (SIGKILL to all its processes), waits up to [`KILL_WAIT`] for it
/// to stop, and deletes it, through containerd's task service in the CRI namespace.
pub async fn kill_task(ch: Channel, id: &str) -> Result<(), tonic::Status> {
    let ns = crate::pleg::CRI_NAMESPACE;
    let mut tasks = TasksClient::new(ch);
    let kill = KillRequest {
        container_id: id.into(),
        exec_id: String::new(),
        signal: 9,
        all: true,
    };
    match tasks
        .kill(containerd_client::with_namespace!(kill, ns))
        .await
    {
        Ok(_) => {}
        Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
        Err(s) => return Err(s),
    }
    let deadline = tokio::time::Instant::now() + KILL_WAIT;
    loop {
        let get = GetRequest {
            container_id: id.into(),
            exec_id: String::new(),
        };
        match tasks.get(containerd_client::with_namespace!(get, ns)).await {
            Ok(r) => {
                let stopped = r
                    .into_inner()
                    .process
                    .is_some_and(|p| p.status == TaskStatus::Stopped as i32);
                if stopped || tokio::time::Instant::now() >= deadline {
                    break;
                }
            }
            Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
            Err(s) => return Err(s),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let del = DeleteTaskRequest {
        container_id: id.into(),
    };
    match tasks
        .delete(containerd_client::with_namespace!(del, ns))
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(s) => Err(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn only_a_refused_delete_of_a_running_task_is_a_stuck_task() {
        let cases = [
            (
                Code::FailedPrecondition,
                "failed to delete containerd container \"2a4b\": cannot delete running task 2a4b: failed precondition",
                true,
            ),
            (
                Code::FailedPrecondition,
                "failed to remove container \"2a4b\": failed to delete containerd container \"2a4b\": cannot delete running task 2a4b: failed precondition",
                true,
            ),
            (Code::FailedPrecondition, "container is in starting state", false),
            (Code::Unknown, "cannot delete running task", false),
            (Code::NotFound, "not found", false),
        ];
        for (code, msg, want) in cases {
            assert_eq!(is_stuck_task(code, msg), want, "{code:?} {msg}");
        }
    }
}
