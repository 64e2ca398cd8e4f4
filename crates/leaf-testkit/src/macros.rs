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

/// Generates `mod $name` with one `#[tokio::test]` per business-tag case
/// ([`period_cases`](crate::period_cases), feature `business`), for a future yielding a
/// [`RestoreFixture`](crate::period_cases::RestoreFixture) (a
/// [`StoreFixture`](crate::StoreFixture) as in [`store_conformance!`] that can also write an
/// older copy of its rows back, for the case of `leaf-server store raise` after a restore).
/// Every store runs them: business tags use nothing but the `SegmentStore` calls every store
/// has.
#[macro_export]
macro_rules! period_conformance {
    ($name:ident, $fixture:expr $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::__conformance_tests!(period_cases, $fixture;
                a_daily_counter_restarts_at_midnight_in_its_zone,
                two_nodes_across_midnight_print_no_id_twice,
                month_and_year_ends_restart_their_counters,
                daylight_saving_changes_keep_local_days,
                a_value_past_the_width_is_an_error_and_steps_are_capped,
                base36_and_base62_ids_round_trip,
                reserved_names_and_definitions,
                sixty_nodes_preloading_a_day_reserve_at_most_a_tenth_of_it,
                a_raise_after_a_restore_from_an_older_copy_repeats_no_id,
            );
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

/// Generates one `#[tokio::test]` per case of `sql_cases::$module` (feature `provision`) for
/// the SQL backend `$backend` (a `sql::SqlBackend`): a case by its name, its arguments (if it
/// takes any) in parentheses; or `name = case(arguments)`, the test named as the caller says. The calling crate needs `tokio` with the `macros` and `rt-multi-thread`
/// features.
///
/// ```text
/// leaf_testkit::sql_tests!(common::Backend, registry;
///     concurrent_first_starts_of_one_identity_one_wins_one_row,
///     marks_reach_the_table_and_release_leaves_the_final_one(true),
///     restarts_burn_no_sequence_values = restarts_burn_no_ids,
/// );
/// ```
#[macro_export]
macro_rules! sql_tests {
    ($backend:ty, $module:ident;
     $($name:ident $(= $case:ident)? $(($($arg:expr),* $(,)?))?),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::__sql_case!($backend, $module, [$($($arg),*)?], $name $($case)?).await;
            }
        )*
    };
}

/// Generates the `#[tokio::test]`s of what every SQL workerId mode runs (`sql_cases::registry`)
/// but its restarts (whose first id a backend may check) and its outage (`fencing`), for
/// `$backend`. `lock_freed_at_release`:
/// whether the lock's session is seen gone as soon as the release returns.
#[macro_export]
macro_rules! sql_registry_tests {
    ($backend:ty, lock_freed_at_release = $freed:expr) => {
        $crate::sql_tests!($backend, registry;
            concurrent_first_starts_of_one_identity_one_wins_one_row,
            a_worker_id_beyond_the_layout_fails_with_a_clear_message,
            marks_reach_the_table_and_release_leaves_the_final_one($freed),
            renewals_never_lower_the_server_mark,
            with_the_fence_a_lock_lost_to_another_process_never_renews_again,
            without_the_fence_a_lock_lost_to_another_process_loses_the_lease,
            a_server_down_at_start_up_starts_from_the_cache_file_with_its_mark,
            a_server_down_without_a_cache_file_is_unavailable,
            a_second_process_on_one_cache_directory_refuses,
            debug_output_hides_the_password,
            a_second_process_whose_lock_wait_runs_out_never_starts_from_its_cache_file,
        );
        $crate::sql_tests!($backend, hold;
            a_connection_attempt_no_one_answers_starts_from_the_cache_file,
            a_server_that_accepts_and_never_answers_was_reached,
            refused_credentials_were_reached,
            after_losing_its_identity_a_node_never_starts_from_its_cache_file,
            a_kept_lock_session_is_proved_before_it_is_reused,
            a_worker_id_given_to_another_identity_loses_the_lease_with_the_fence =
                a_worker_id_given_to_another_identity_loses_the_lease(true),
            a_worker_id_given_to_another_identity_loses_the_lease_without_the_fence =
                a_worker_id_given_to_another_identity_loses_the_lease(false),
            mark_statements_prove_the_lock_and_the_identity,
        );
        $crate::sql_tests!($backend, leases;
            the_leased_pool_grants_its_lease_ttl,
            racing_claims_of_a_pool_of_one_give_it_to_one,
        );
    };
}

/// Generates the `#[tokio::test]`s of what every SQL segment store runs
/// (`sql_cases::store`) for `$backend`.
#[macro_export]
macro_rules! sql_store_tests {
    ($backend:ty) => {
        $crate::sql_tests!($backend, store;
            a_table_without_leafs_columns_is_a_config_error,
            a_wrong_password_is_a_config_error_that_does_not_show_it,
            an_unreachable_server_is_unavailable_quickly,
            debug_output_hides_the_password,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sql_case {
    ($backend:ty, $module:ident, [$($arg:expr),*], $name:ident) => {
        $crate::sql_cases::$module::$name::<$backend>($($arg),*)
    };
    ($backend:ty, $module:ident, [$($arg:expr),*], $name:ident $case:ident) => {
        $crate::sql_cases::$module::$case::<$backend>($($arg),*)
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
        $crate::__conformance_tests!(monotonic_cases, $fixture;
            a_monotonic_claim_taken_over_after_a_freeze_or_a_crash_keeps_ids_in_order,
            a_released_monotonic_claim_goes_to_the_next_node_at_once,
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

/// Generates, for the SQL backend `$backend` and its fixture type `$fix`
/// ([`SqlFix`](crate::sql::SqlFix)), the whole conformance suite on the secured server
/// (store, workerId mode with and without the fence, the monotonic leader's leased pool;
/// [`SqlFix::secured`](crate::sql::SqlFix))
/// and the secured cases (`sql_cases::secured`).
#[macro_export]
macro_rules! sql_secured_tests {
    ($backend:ty, $fix:ty) => {
        $crate::store_conformance!(
            store_secured,
            async { <$fix>::secured().await },
            durable = true,
            multi_process = true,
        );
        $crate::registry_conformance!(
            registry_secured,
            async { <$fix>::secured().await },
            recycles = false,
            assigns_distinct_ids = true,
            exclusive_identity = true,
            confirms_marks = false,
        );
        $crate::registry_conformance!(
            registry_secured_fenced,
            async { <$fix>::secured_fenced().await },
            recycles = false,
            assigns_distinct_ids = true,
            exclusive_identity = true,
            confirms_marks = true,
        );
        $crate::registry_conformance!(
            registry_secured_leased,
            async { <$fix>::secured_leased().await },
            recycles = true,
            assigns_distinct_ids = true,
            exclusive_identity = false,
            confirms_marks = true,
        );
        $crate::sql_tests!($backend, secured;
            the_project_user_allocates_and_claims_over_verified_tls,
            a_wrong_ca_is_refused_at_start_naming_ca_file,
            a_wrong_host_name_is_refused_at_start,
            without_the_client_certificate_the_start_is_refused,
            a_plain_connection_to_a_tls_only_server_is_refused,
            bad_secrets_are_refused_naming_the_key,
            a_rotated_password_file_is_used_at_reconnect,
        );
    };
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
