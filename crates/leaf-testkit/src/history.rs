//! A checker of histories of ID requests for strictly increasing (linearizable) IDs, as the
//! monotonic mode promises (issue 37): if one request completed before another was invoked,
//! anywhere in the cluster, every ID of the second is larger than every ID of the first; and no
//! ID is handed out twice, whatever the order.
//!
//! A test records each request's invoke and completion times (on one clock: the test process's
//! [`Instant`]) and the IDs it got, from any number of clients and nodes, then [`check`]s the
//! whole history. Requests that overlap in time may be answered in either order; a failed
//! request (no IDs) takes part in nothing. The check sorts once and sweeps: `O(n log n)` in the
//! number of requests, for histories of hundreds of thousands of IDs.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One request as a client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Who asked (for the report).
    pub client: String,
    /// Which node answered (for the report).
    pub node: String,
    /// When the request was sent, since the history's start.
    pub invoked: Duration,
    /// When its answer arrived, since the history's start.
    pub completed: Duration,
    /// The IDs it got, in the order given; empty for a failed request.
    pub ids: Vec<i64>,
}

/// What the check found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// `id` was handed out by two requests (or twice in one).
    Repeated {
        /// The ID.
        id: i64,
        /// The request that got it first in the history's order, and the other.
        ops: (usize, usize),
    },
    /// Request `earlier` completed before request `later` was invoked, yet `later` got an ID
    /// (`later_min`) not above every ID of `earlier` (`earlier_max`).
    OutOfOrder {
        /// The request that completed first.
        earlier: usize,
        /// The request invoked after it completed.
        later: usize,
        /// The largest ID of `earlier`.
        earlier_max: i64,
        /// The smallest ID of `later`.
        later_min: i64,
    },
}

/// What a passing check looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Requests with IDs.
    pub requests: usize,
    /// Failed requests (no IDs), which constrain nothing.
    pub failed: usize,
    /// IDs checked.
    pub ids: usize,
    /// Pairs of requests in real-time order (one completed before the other was invoked) that
    /// the sweep compared through the running maximum: at most `requests - 1` comparisons
    /// stand for all of them.
    pub ordered_requests: usize,
}

/// A history being recorded by concurrent clients.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            start: Instant::now(),
            ops: Mutex::default(),
        }
    }
}

impl Recorder {
    /// An empty history starting now.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one request: sent at `invoked`, answered at `completed`, with `ids` (empty when
    /// it failed).
    pub fn record(
        &self,
        client: &str,
        node: &str,
        invoked: Instant,
        completed: Instant,
        ids: Vec<i64>,
    ) {
        let op = Op {
            client: client.to_string(),
            node: node.to_string(),
            invoked: invoked.saturating_duration_since(self.start),
            completed: completed.saturating_duration_since(self.start),
            ids,
        };
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// The instant the history's times count from.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The history so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Checks `ops`: no ID twice, and for every pair where one completed before the other was
/// invoked, the later one's IDs all above the earlier one's. `Err` lists every repeated ID and,
/// for each request that breaks the order, the earlier request with the largest ID it should
/// have been above.
pub fn check(ops: &[Op]) -> Result<Checked, Vec<Violation>> {
    let mut violations = Vec::new();
    let mut owner: HashMap<i64, usize> = HashMap::new();
    let mut ids = 0;
    for (i, op) in ops.iter().enumerate() {
        for &id in &op.ids {
            ids += 1;
            if let Some(&first) = owner.get(&id) {
                violations.push(Violation::Repeated {
                    id,
                    ops: (first, i),
                });
            } else {
                owner.insert(id, i);
            }
        }
    }
    // (min, max) of each request with IDs.
    let with_ids: Vec<(usize, i64, i64)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| Some((i, *op.ids.iter().min()?, *op.ids.iter().max()?)))
        .collect();
    let mut by_invoke: Vec<&(usize, i64, i64)> = with_ids.iter().collect();
    by_invoke.sort_by_key(|(i, ..)| ops[*i].invoked);
    let mut by_completion: Vec<&(usize, i64, i64)> = with_ids.iter().collect();
    by_completion.sort_by_key(|(i, ..)| ops[*i].completed);
    // The sweep: in invoke order, every request completed strictly before this one's invoke
    // has joined the running maximum, which this one's smallest ID must be above.
    let mut done = 0;
    let mut running: Option<(i64, usize)> = None;
    let mut ordered = 0;
    for &&(later, later_min, _) in &by_invoke {
        while done < by_completion.len()
            && ops[by_completion[done].0].completed < ops[later].invoked
        {
            let (i, _, max) = *by_completion[done];
            if running.is_none_or(|(m, _)| max > m) {
                running = Some((max, i));
            }
            done += 1;
        }
        if let Some((earlier_max, earlier)) = running {
            ordered += 1;
            if later_min <= earlier_max {
                violations.push(Violation::OutOfOrder {
                    earlier,
                    later,
                    earlier_max,
                    later_min,
                });
            }
        }
    }
    if violations.is_empty() {
        Ok(Checked {
            requests: with_ids.len(),
            failed: ops.len() - with_ids.len(),
            ids,
            ordered_requests: ordered,
        })
    } else {
        Err(violations)
    }
}

/// The violations of [`check`] as lines naming the requests (client, node, times, IDs).
pub fn describe(ops: &[Op], violations: &[Violation]) -> String {
    let op = |i: usize| -> String {
        let o = &ops[i];
        format!(
            "#{i} {} on {} [{:?} .. {:?}]",
            o.client, o.node, o.invoked, o.completed
        )
    };
    let mut out = String::new();
    for v in violations {
        let line = match v {
            Violation::Repeated { id, ops: (a, b) } => {
                format!("ID {id} twice: {} and {}", op(*a), op(*b))
            }
            Violation::OutOfOrder {
                earlier,
                later,
                earlier_max,
                later_min,
            } => format!(
                "out of order: {} got {later_min}, not above {earlier_max} of {}, which \
                 completed before it was sent",
                op(*later),
                op(*earlier)
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} IDs in {} requests ({} failed), {} of them after another completed: no ID twice, \
             none out of order",
            self.ids, self.requests, self.failed, self.ordered_requests
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: &str, invoked_ms: u64, completed_ms: u64, ids: &[i64]) -> Op {
        Op {
            client: client.into(),
            node: "n1".into(),
            invoked: Duration::from_millis(invoked_ms),
            completed: Duration::from_millis(completed_ms),
            ids: ids.to_vec(),
        }
    }

    #[test]
    fn overlapping_requests_may_be_answered_in_either_order() {
        // b overlaps a and got smaller IDs: allowed. c was sent after both completed.
        let ops = [
            op("a", 0, 10, &[5, 6]),
            op("b", 5, 12, &[3, 4]),
            op("c", 13, 14, &[7]),
            op("failed", 1, 20, &[]),
        ];
        let checked = check(&ops).unwrap();
        assert_eq!(
            checked,
            Checked {
                requests: 3,
                failed: 1,
                ids: 5,
                ordered_requests: 1
            }
        );
    }

    #[test]
    fn a_request_sent_after_another_completed_must_get_larger_ids() {
        // c was sent after a completed, yet got 5, below a's 6: a violation naming both.
        let ops = [
            op("a", 0, 10, &[5, 6]),
            op("b", 5, 12, &[3, 4]),
            op("c", 11, 14, &[2]),
        ];
        let err = check(&ops).unwrap_err();
        assert_eq!(
            err,
            [Violation::OutOfOrder {
                earlier: 0,
                later: 2,
                earlier_max: 6,
                later_min: 2
            }]
        );
        let text = describe(&ops, &err);
        assert!(
            text.contains("#2 c on n1") && text.contains("not above 6 of #0 a"),
            "{text}"
        );
    }

    #[test]
    fn the_running_maximum_is_of_every_earlier_request_not_the_last() {
        // a (max 100) and b (max 7) both completed before c; c above b but not above a.
        let ops = [
            op("a", 0, 2, &[100]),
            op("b", 1, 5, &[7]),
            op("c", 6, 7, &[50]),
        ];
        let err = check(&ops).unwrap_err();
        assert!(
            matches!(
                err[..],
                [Violation::OutOfOrder {
                    earlier: 0,
                    later: 2,
                    ..
                }]
            ),
            "{err:?}"
        );
    }

    #[test]
    fn an_id_handed_out_twice_fails_in_any_order() {
        let ops = [
            op("a", 0, 10, &[5]),
            op("b", 0, 10, &[5]),
            op("c", 0, 1, &[9, 9]),
        ];
        let err = check(&ops).unwrap_err();
        assert_eq!(
            err,
            [
                Violation::Repeated { id: 5, ops: (0, 1) },
                Violation::Repeated { id: 9, ops: (2, 2) }
            ]
        );
    }

    #[test]
    fn requests_that_touch_in_time_are_concurrent_and_equal_ids_are_never_in_order() {
        // b was sent the instant a completed: concurrent, any order.
        assert!(check(&[op("a", 0, 10, &[5]), op("b", 10, 11, &[4])]).is_ok());
        // Strictly after, an equal ID is out of order (and repeated).
        let err = check(&[op("a", 0, 10, &[5]), op("b", 11, 12, &[5])]).unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
    }

    #[test]
    fn a_recorder_takes_requests_from_many_threads() {
        let recorder = std::sync::Arc::new(Recorder::new());
        let handles: Vec<_> = (0..4i64)
            .map(|t| {
                let r = std::sync::Arc::clone(&recorder);
                std::thread::spawn(move || {
                    for i in 0..100 {
                        let invoked = Instant::now();
                        let ids = vec![t * 1000 + i];
                        r.record(&format!("t{t}"), "n", invoked, Instant::now(), ids);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let ops = recorder.ops();
        assert_eq!(ops.len(), 400);
        assert!(ops.iter().all(|o| o.invoked <= o.completed));
        // Distinct IDs: whatever the threads' interleaving, nothing is repeated (and a thread
        // that ran after another completed is above it only if the scheduler ran them so).
        if let Err(v) = check(&ops) {
            assert!(
                v.iter().all(|v| matches!(v, Violation::OutOfOrder { .. })),
                "{v:?}"
            );
        }
    }

    /// Every pair compared directly: what the sweep must agree with.
    fn brute_force_ok(ops: &[Op]) -> bool {
        let mut seen = std::collections::HashSet::new();
        if !ops.iter().flat_map(|o| &o.ids).all(|id| seen.insert(*id)) {
            return false;
        }
        ops.iter().all(|a| {
            ops.iter().all(|b| {
                a.completed >= b.invoked
                    || a.ids.is_empty()
                    || b.ids.is_empty()
                    || a.ids.iter().max() < b.ids.iter().min()
            })
        })
    }

    #[test]
    fn the_sweep_agrees_with_comparing_every_pair_on_random_histories() {
        let mut rng = fastrand::Rng::with_seed(37);
        let (mut passed, mut failed) = (0, 0);
        for _ in 0..3000 {
            let n = rng.usize(1..12);
            let ops: Vec<Op> = (0..n)
                .map(|i| {
                    let invoked = rng.u64(0..50);
                    let ids = (0..rng.usize(0..3))
                        .map(|_| rng.i64(0..40))
                        .collect::<Vec<_>>();
                    op(&format!("c{i}"), invoked, invoked + rng.u64(0..20), &ids)
                })
                .collect();
            let expected = brute_force_ok(&ops);
            assert_eq!(check(&ops).is_ok(), expected, "{ops:?}");
            if expected {
                passed += 1;
            } else {
                failed += 1;
            }
        }
        // Both outcomes were exercised.
        assert!(
            passed > 100 && failed > 100,
            "{passed} passed, {failed} failed"
        );
    }
}
