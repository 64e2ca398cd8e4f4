//! The macros that turn the conformance cases into one `#[tokio::test]` per case per backend.
//!
//! Capability-gated cases are chosen when the macro expands, from the capabilities the caller
//! declares; a generated `capabilities_are_as_declared` test fails if the backend reports
//! anything else, so no case is skipped by an incomplete or wrong declaration.

/// Generates `mod $name` with one `#[tokio::test]` per segment-store case.
///
/// `$fixture` is an expression of a future yielding a [`StoreFixture`](crate::StoreFixture)
/// (it is evaluated afresh in every test, so every test has its own namespace); it is resolved
/// inside the generated module, which imports its parent's names. Every capability of
/// `leaf_core::StoreCapabilities` is declared, `durable` and `multi_process`, each `= true` or
/// `= false`. The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
///
/// ```
/// # use std::sync::Arc;
/// # use leaf_core::SegmentStore;
/// # struct SqliteFixture(Arc<leaf_testkit::MemoryStore>);
/// # impl SqliteFixture {
/// #     async fn new() -> Self { SqliteFixture(Arc::default()) }
/// # }
/// # #[async_trait::async_trait]
/// # impl leaf_testkit::StoreFixture for SqliteFixture {
/// #     async fn store(&self) -> Arc<dyn SegmentStore> { self.0.clone() }
/// #     async fn another_handle(&self) -> Arc<dyn SegmentStore> { self.0.clone() }
/// # }
/// leaf_testkit::store_conformance!(
///     sqlite,
///     async { SqliteFixture::new().await },
///     durable = true,
///     multi_process = true,
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_conformance {
    ($name:ident, $fixture:expr, $($cap:ident = $val:tt),+ $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::__conformance_tests!(store_cases, $fixture;
                disjoint_ranges_under_concurrency,
                custom_step,
                unknown_tag_is_not_found,
                listing_is_ordered_and_complete,
                create_and_duplicate_create,
                step_update,
                invalid_input_is_refused,
                the_last_ids_are_handed_out_then_exhausted,
            );
            $( $crate::__store_capability!($cap = $val; $fixture); )+

            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn capabilities_are_as_declared() {
                let fixture = $fixture.await;
                $crate::store_cases::capabilities_are_as_declared(
                    &fixture,
                    &[$((stringify!($cap), $val)),+],
                )
                .await;
            }
        }
    };
}

/// Generates `mod $name` with one `#[tokio::test]` per worker-id registry case.
///
/// As [`store_conformance!`], with a future yielding a
/// [`RegistryFixture`](crate::RegistryFixture) and the capabilities of
/// `leaf_core::RegistryCapabilities`: `recycles`, `assigns_distinct_ids`,
/// `exclusive_identity` and `confirms_marks`.
///
/// ```
/// # use std::sync::Arc;
/// # use leaf_core::{NodeIdentity, WorkerIdRegistry};
/// # struct LocalFixture(Arc<leaf_testkit::MemoryRegistryPool>);
/// # impl LocalFixture {
/// #     fn new() -> Self { LocalFixture(leaf_testkit::MemoryRegistryPool::new(false)) }
/// # }
/// # #[async_trait::async_trait]
/// # impl leaf_testkit::RegistryFixture for LocalFixture {
/// #     async fn node(&self) -> Arc<dyn WorkerIdRegistry> { Arc::new(self.0.node()) }
/// #     async fn restarted(&self, _: Arc<dyn WorkerIdRegistry>) -> Arc<dyn WorkerIdRegistry> {
/// #         self.node().await
/// #     }
/// #     fn identity(&self, i: u16) -> NodeIdentity { NodeIdentity::new("10.0.0.1", i) }
/// # }
/// leaf_testkit::registry_conformance!(
///     local,
///     async { LocalFixture::new() },
///     recycles = false,
///     assigns_distinct_ids = false,
///     exclusive_identity = false,
///     confirms_marks = true,
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! registry_conformance {
    ($name:ident, $fixture:expr, $($cap:ident = $val:tt),+ $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::__conformance_tests!(registry_cases, $fixture;
                acquire_renew_release,
                distinct_identities_get_distinct_ids,
                mark_comes_back_on_reacquire,
                release_then_reacquire,
                renew_after_release_is_lease_lost,
                acquire_after_abandon_on_the_same_instance,
                a_late_lower_mark_never_lowers_the_stored_one,
            );
            $( $crate::__registry_capability!($cap = $val; $fixture); )+

            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn capabilities_are_as_declared() {
                let fixture = $fixture.await;
                $crate::registry_cases::capabilities_are_as_declared(
                    &fixture,
                    &[$((stringify!($cap), $val)),+],
                )
                .await;
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($module:ident, $fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = $fixture.await;
                $crate::$module::$case(&fixture).await;
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_capability {
    (durable = true; $fixture:expr) => {
        $crate::__conformance_tests!(store_cases, $fixture; durable_across_a_new_handle);
    };
    (multi_process = true; $fixture:expr) => {
        $crate::__conformance_tests!(store_cases, $fixture; handles_share_one_namespace);
    };
    (durable = false; $fixture:expr) => {};
    (multi_process = false; $fixture:expr) => {};
    ($cap:ident = $val:tt; $fixture:expr) => {
        ::core::compile_error!(::core::concat!(
            "unknown store capability `", ::core::stringify!($cap = $val),
            "`: declare durable and multi_process, each = true or = false"
        ));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __registry_capability {
    (recycles = true; $fixture:expr) => {
        $crate::__conformance_tests!(registry_cases, $fixture;
            released_id_carries_its_mark,
            pool_stays_within_the_layout,
            granted_ttl_fits_the_callers_timing,
            expired_id_returns_with_its_last_renewed_mark,
            far_ahead_mark_is_skipped,
        );
    };
    (recycles = false; $fixture:expr) => {
        $crate::__conformance_tests!(registry_cases, $fixture;
            same_identity_gets_the_same_id,
            renewed_mark_survives_a_crash,
            id_beyond_the_layout_is_config,
        );
    };
    (assigns_distinct_ids = true; $fixture:expr) => {
        $crate::__conformance_tests!(registry_cases, $fixture; new_identities_get_distinct_ids);
    };
    (assigns_distinct_ids = false; $fixture:expr) => {
        $crate::__conformance_tests!(registry_cases, $fixture; unconfigured_identity_is_config);
    };
    (exclusive_identity = true; $fixture:expr) => {
        $crate::__conformance_tests!(registry_cases, $fixture;
            second_live_holder_of_an_identity_is_refused,
        );
    };
    (exclusive_identity = false; $fixture:expr) => {};
    (confirms_marks = true; $fixture:expr) => {
        $crate::__conformance_tests!(registry_cases, $fixture;
            a_confirmed_mark_survives_a_crash_on_another_node,
        );
    };
    (confirms_marks = false; $fixture:expr) => {};
    ($cap:ident = $val:tt; $fixture:expr) => {
        ::core::compile_error!(::core::concat!(
            "unknown registry capability `", ::core::stringify!($cap = $val),
            "`: declare recycles, assigns_distinct_ids, exclusive_identity and confirms_marks, \
             each = true or = false"
        ));
    };
}

/// Asserts that every capability the backend reports is declared with the same value.
pub(crate) fn check_declared(actual: &[(&str, bool)], declared: &[(&str, bool)]) {
    for (name, value) in actual {
        let said: Vec<bool> = declared
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(
            said,
            [*value],
            "capability {name}: the backend reports {value}; declare `{name} = {value}` once"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::check_declared;

    #[test]
    fn matching_declaration_passes() {
        check_declared(&[("a", true), ("b", false)], &[("b", false), ("a", true)]);
    }

    #[test]
    fn wrong_missing_or_repeated_declarations_fail() {
        let fails = |declared: &'static [(&'static str, bool)]| {
            std::panic::catch_unwind(|| check_declared(&[("a", true), ("b", false)], declared))
                .is_err()
        };
        assert!(fails(&[("a", false), ("b", false)]), "a wrong value");
        assert!(fails(&[("a", true)]), "a missing capability");
        assert!(
            fails(&[("a", true), ("a", true), ("b", false)]),
            "a repeated one"
        );
    }
}
