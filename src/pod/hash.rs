//! The container hash (k/k `kubecontainer.HashContainer`): which changes of a container's spec
//! restart it.

use k8s_openapi::api::core::v1::Container;

fn fnv1a_hex(bytes: &[u8]) -> String {
    let mut h: u32 = 0x811c9dc5;
    for b in bytes {
        h ^= *b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    format!("{h:x}")
}

/// A stable hash of the container fields whose change restarts it, its name and image
/// (FNV-1a over their JSON), in hex; stored as the `io.kubernetes.container.hash` annotation
/// (k/k `kubecontainer.HashContainer`: only `name` and `image`, the only container fields
/// that change on a running pod besides `resources`, which are resized in place).
pub fn container_hash(c: &Container) -> String {
    let fields = serde_json::json!({"image": c.image.clone().unwrap_or_default(), "name": c.name});
    fnv1a_hex(&serde_json::to_vec(&fields).unwrap_or_default())
}

/// Whether the container instance with hash annotation `hash` was created from `c` as it is
/// now: the [`container_hash`] of `c`, or the hash of the whole spec that deckhand stored
/// before it hashed name and image only (so an upgrade restarts nothing).
pub fn container_hash_matches(hash: &str, c: &Container) -> bool {
    hash == container_hash(c) || hash == fnv1a_hex(&serde_json::to_vec(c).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_name_and_image_make_the_container_hash() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c1", "image": "busybox", "resources": {"limits": {"cpu": "20m"}}}))
        .unwrap();
        let mut resized = c.clone();
        resized.resources =
            serde_json::from_value(serde_json::json!({"limits": {"cpu": "30m"}})).unwrap();
        assert_eq!(
            container_hash(&c),
            container_hash(&resized),
            "a resize restarts nothing"
        );
        let mut new_image = c.clone();
        new_image.image = Some("busybox:2".into());
        assert_ne!(container_hash(&c), container_hash(&new_image));
        assert!(container_hash_matches(&container_hash(&c), &resized));
        let legacy = fnv1a_hex(&serde_json::to_vec(&c).unwrap());
        assert!(
            container_hash_matches(&legacy, &c),
            "containers made by older deckhand keep running"
        );
        assert!(!container_hash_matches(&container_hash(&c), &new_image));
    }
}
