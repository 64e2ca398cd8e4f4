//! The embedded default is for one node: segment mode on an SQLite file of this machine and
//! snowflake mode on the `local` worker id 0. Two nodes started on it behind one load balancer
//! hand out the same segment IDs and the same snowflake IDs, and nothing else would say so: the
//! server logs these warnings at start-up and the console's index shows them.

use crate::compose::backends::choices;
use crate::compose::config::Config;

/// What the configuration leaves on a one-node default, one sentence each naming what to set
/// for a second node; empty when neither enabled mode is on one.
pub(crate) fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if config.segment.enabled && config.segment.store == "sqlite" {
        out.push(format!(
            "segment mode runs on the embedded SQLite store (segment.store = \"sqlite\"): its \
             IDs are unique only among the processes of this machine that share its file. \
             Before a second node serves, set segment.store to a shared store ({}) and its \
             segment.url, the same on every node",
            others("segment.store", "sqlite")
        ));
    }
    if config.snowflake.enabled && config.snowflake.mode == "local" && on_default_worker_id(config)
    {
        out.push(format!(
            "snowflake mode runs on the local workerId mode with worker id 0, the default: a \
             second node on the default issues the same IDs. Give each node its own \
             snowflake.local.worker_id (or snowflake.local.work_id_map, or worker_id_from = \
             \"hostname_ordinal\"), or set snowflake.mode to a shared registry ({})",
            others("snowflake.mode", "local")
        ));
    }
    if config.monotonic.enabled
        && config.snowflake.mode == "local"
        && local_monotonic_refusal(config).is_none()
    {
        out.push(
            "monotonic IDs run on the local workerId mode: this node is its own leader, and a \
             second node on the default would issue the same monotonic IDs. For a cluster, set \
             snowflake.mode to zk_recycle, etcd or redis (or monotonic.enabled = false)"
                .to_owned(),
        );
    }
    out
}

/// Why monotonic IDs are not served on the `local` workerId mode of `config`, if they are not.
/// Every `local` node is its own leader and its IDs carry no worker id, so two nodes issue the
/// same ones: they are served only on the embedded one-node default (the SQLite store and
/// worker id 0 from `worker_id` alone), where a second node would repeat the other modes' IDs
/// too, and where the start-up warnings say so. A configuration made for several nodes (a
/// shared segment store, a worker id of its own, a map, a host-name ordinal) is refused.
pub(crate) fn local_monotonic_refusal(config: &Config) -> Option<String> {
    if !config.monotonic.enabled || config.snowflake.mode != "local" {
        return None;
    }
    if config.segment.store == "sqlite" && on_default_worker_id(config) {
        return None;
    }
    Some(
        "monotonic IDs are not served on the local workerId mode outside the one-node default \
         (segment.store = \"sqlite\" and snowflake.local.worker_id = 0): every local node is \
         its own leader, and several would issue the same IDs. Set snowflake.mode to \
         zk_recycle, etcd or redis to elect one leader for the cluster (monotonic.enabled = \
         false silences this)"
            .to_owned(),
    )
}

/// The names `key` takes in the table of backends but `one`, as prose: `a, b or c`.
fn others(key: &str, one: &str) -> String {
    let names: Vec<&str> = choices()
        .filter(|c| c.key == key && c.name != one)
        .map(|c| c.name)
        .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Whether `[snowflake.local]` gives this node worker id 0 from `worker_id` alone (no map, no
/// host-name ordinal).
#[cfg(feature = "local")]
fn on_default_worker_id(config: &Config) -> bool {
    use leaf_registry_local::{LocalRegistryConfig, WorkerIdFrom};
    // A table that does not read is refused at load; here it only means "not the default".
    crate::compose::config::read::<LocalRegistryConfig>(
        config.snowflake.backends.get("local"),
        "snowflake.local",
    )
    .is_ok_and(|local| {
        local.worker_id_from == WorkerIdFrom::Config
            && local.work_id_map.is_empty()
            && local.worker_id == 0
    })
}

/// Without the `local` feature the mode cannot start at all, and says so.
#[cfg(not(feature = "local"))]
fn on_default_worker_id(_: &Config) -> bool {
    false
}

#[cfg(all(test, feature = "local", feature = "sqlite"))]
mod tests {
    use super::*;

    fn loaded(vars: &[(&str, &str)]) -> Config {
        let env = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        crate::compose::config::load(None, env).unwrap().config
    }

    /// `(segment warned, snowflake warned, monotonic warned)` for the configuration of `vars`.
    fn check(vars: &[(&str, &str)], expect: (bool, bool, bool)) {
        let w = warnings(&loaded(vars));
        let got = (
            w.iter().any(|m| m.starts_with("segment mode")),
            w.iter().any(|m| m.starts_with("snowflake mode")),
            w.iter().any(|m| m.starts_with("monotonic IDs")),
        );
        assert_eq!(got, expect, "{vars:?}: {w:?}");
        let n = usize::from(got.0) + usize::from(got.1) + usize::from(got.2);
        assert_eq!(w.len(), n, "{w:?}");
    }

    #[test]
    fn the_defaults_warn_for_both_modes_naming_what_to_set() {
        let w = warnings(&Config::default());
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[2].contains("monotonic.enabled = false"), "{}", w[2]);
        assert!(w[0].contains("segment.store") && w[0].contains("segment.url"));
        assert!(w[1].contains("snowflake.local.worker_id") && w[1].contains("snowflake.mode"));
        // The shared ones, from the table of backends.
        assert!(
            w[0].contains("(mysql, postgres, etcd or redis)"),
            "{}",
            w[0]
        );
        let modes = "(zk_normal, zk_recycle, mysql, postgres, etcd or redis)";
        assert!(w[1].contains(modes), "{}", w[1]);
        check(&[], (true, true, true));
    }

    #[test]
    fn monotonic_ids_on_local_are_refused_off_the_one_node_default() {
        assert_eq!(local_monotonic_refusal(&loaded(&[])), None);
        for vars in [
            &[("LEAF_SEGMENT__STORE", "mysql")][..],
            &[("LEAF_SNOWFLAKE__LOCAL__WORKER_ID", "2")],
            &[("LEAF_SNOWFLAKE__LOCAL__WORKER_ID_FROM", "hostname_ordinal")],
            &[(
                "LEAF_SNOWFLAKE__LOCAL__WORK_ID_MAP",
                "{\"10.0.0.1:8080\" = 0, \"10.0.0.2:8080\" = 1}",
            )],
        ] {
            let why = local_monotonic_refusal(&loaded(vars)).expect("refused");
            assert!(why.contains("zk_recycle, etcd or redis"), "{vars:?}: {why}");
        }
        for vars in [
            &[
                ("LEAF_MONOTONIC__ENABLED", "false"),
                ("LEAF_SEGMENT__STORE", "mysql"),
            ][..],
            &[
                ("LEAF_SNOWFLAKE__MODE", "redis"),
                ("LEAF_SEGMENT__STORE", "mysql"),
            ],
        ] {
            assert_eq!(local_monotonic_refusal(&loaded(vars)), None, "{vars:?}");
        }
    }

    #[test]
    fn shared_stores_and_own_worker_ids_are_not_warned_about() {
        let mysql = ("LEAF_SEGMENT__STORE", "mysql");
        // Monotonic IDs off the one-node default are refused (a 503 naming why), not warned.
        check(&[mysql], (false, true, false));
        check(&[("LEAF_SEGMENT__ENABLED", "false")], (false, true, true));
        check(&[("LEAF_SNOWFLAKE__ENABLED", "false")], (true, false, true));
        check(
            &[("LEAF_SNOWFLAKE__MODE", "zk_recycle")],
            (true, false, false),
        );
        check(
            &[("LEAF_SNOWFLAKE__LOCAL__WORKER_ID", "3")],
            (true, false, false),
        );
        check(&[("LEAF_MONOTONIC__ENABLED", "false")], (true, true, false));
        check(
            &[(
                "LEAF_SNOWFLAKE__LOCAL__WORK_ID_MAP",
                "{\"10.0.0.1:8080\" = 0}",
            )],
            (true, false, false),
        );
        check(
            &[("LEAF_SNOWFLAKE__LOCAL__WORKER_ID_FROM", "hostname_ordinal")],
            (true, false, false),
        );
        check(
            &[mysql, ("LEAF_SNOWFLAKE__MODE", "mysql")],
            (false, false, false),
        );
    }
}
