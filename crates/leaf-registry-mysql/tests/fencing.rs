//! `fence_on_disconnect` on a real server (issue 23, item 2): one identity in two processes
//! across a database outage that A, behind a proxy, stays cut off from for longer, so that B
//! takes the identity. With the fence no ID is issued by both; without it, what happens is
//! recorded (Leaf's availability, and the documented risk of the default).
//! `leaf_testkit::sql_cases::registry::outage`, on a MySQL container of the test's own.

mod common;

leaf_testkit::sql_tests!(common::Backend, registry;
    with_fence_on_disconnect_no_id_is_issued_by_both,
    without_fence_on_disconnect_the_cut_off_holder_issues_beside_the_next,
);
