//! Loading segments: a tag's first load, the background preload, and the retry loop with
//! backoff behind both.

use super::*;

impl Inner {
    /// Waits for the tag's first segment, starting its load if none is running. No time bound:
    /// the store's own answer (or timeout) ends the load.
    pub(super) async fn first_load(self: &Arc<Self>, entry: &Arc<TagEntry>) -> Result<()> {
        let mut seen = None;
        loop {
            let mut notified = pin!(entry.notify.notified());
            {
                let mut s = entry.lock();
                if s.initialized {
                    return Ok(());
                }
                if seen.is_some_and(|g| g != s.load_gen)
                    && let Some(e) = &s.last_error
                {
                    return Err(clone_error(e));
                }
                if let Some(why) = s.exhausted(self.clock.monotonic(), self.config.miss_ttl) {
                    return Err(Error::Exhausted(why));
                }
                if !s.loading {
                    self.begin_load(entry, &mut s, true)?;
                }
                seen = Some(s.load_gen);
                notified.as_mut().enable();
            }
            notified.await;
        }
    }

    /// Called by the one request that crossed the preload point.
    #[cold]
    pub(crate) fn request_preload(self: &Arc<Self>, entry: &Arc<TagEntry>) {
        if entry.is_removed() {
            return;
        }
        let mut s = entry.lock();
        let now = self.clock.monotonic();
        if s.initialized
            && !s.next_ready
            && !s.loading
            && s.exhausted(now, self.config.miss_ttl).is_none()
            && let Err(e) = self.begin_load(entry, &mut s, false)
        {
            tracing::warn!(tag = %entry.tag, error = %e, "cannot preload the next segment");
        }
    }

    /// Starts the tag's one load task. The caller holds the entry's lock and has checked that no
    /// load is running.
    pub(super) fn begin_load(
        self: &Arc<Self>,
        entry: &Arc<TagEntry>,
        s: &mut Slow,
        first: bool,
    ) -> Result<()> {
        let handle = Handle::try_current().map_err(|_| {
            Error::Unavailable("the segment allocator must run inside a tokio runtime".into())
        })?;
        s.loading = true;
        handle.spawn(run_load(
            Arc::downgrade(self),
            self.clock.clone(),
            entry.clone(),
            first,
        ));
        Ok(())
    }

    /// One allocation from the store, installed on success.
    async fn load_once(&self, entry: &TagEntry) -> Result<()> {
        let started = self.clock.monotonic();
        let rule = self.step_rule();
        let step = {
            let s = entry.lock();
            match rule {
                Some(rule) => rule.step(&entry.tag, s.last_load_at.map(|_| s.step)),
                None => s.last_load_at.map(|at| {
                    next_step(
                        s.step,
                        s.stored_step,
                        started.saturating_sub(at),
                        &self.config,
                    )
                }),
            }
        };
        let result = self
            .store
            .allocate(&entry.tag, step)
            .await
            .and_then(|a| Seg::from_allocation(&a, self.store.kind()).map(|seg| (a, seg)));
        let now = self.clock.monotonic();
        if let Some(o) = self.observer() {
            o.on_load(&entry.tag, result.is_ok(), now.saturating_sub(started));
        }
        let mut s = entry.lock();
        let installed = result.and_then(|(a, seg)| {
            entry.install(&mut s, seg, self.config.threshold())?;
            Ok((a, seg))
        });
        let (a, seg) = match installed {
            Ok(ok) => ok,
            Err(e) => {
                s.loads_failed += 1;
                return Err(e);
            }
        };
        s.step = a.used_step;
        s.stored_step = a.step;
        s.last_load_at = Some(started);
        s.loads_ok += 1;
        s.loading = false;
        s.load_gen += 1;
        s.last_error = None;
        let issued = entry.issued(&s);
        s.usage.sample(now, issued);
        drop(s);
        entry.notify.notify_waiters();
        tracing::debug!(tag = %entry.tag, start = seg.start, len = seg.len, step = ?step, "segment loaded");
        Ok(())
    }
}

/// The tag's load task: one attempt for a first load (its waiters get the store's answer);
/// retries with backoff for a later one, until it succeeds, the tag is dropped or exhausted, or
/// the allocator is dropped.
async fn run_load(inner: Weak<Inner>, clock: Arc<dyn Clock>, entry: Arc<TagEntry>, first: bool) {
    let mut backoff: Option<Duration> = None;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let err = match strong.load_once(&entry).await {
            Ok(()) => return,
            Err(e) => e,
        };
        let max = strong.config.retry_backoff_max;
        // Not held while sleeping: a dropped allocator ends the retries.
        drop(strong);
        // An exhausted tag stays so until its row changes: no retry would help.
        let exhausted = match &err {
            Error::Exhausted(why) => Some(why.clone()),
            _ => None,
        };
        if first || entry.is_removed() || exhausted.is_some() {
            if exhausted.is_some() {
                tracing::warn!(tag = %entry.tag, error = %err, "the tag has no ids left");
            } else {
                tracing::debug!(tag = %entry.tag, error = %err, "loading the first segment failed");
            }
            let mut s = entry.lock();
            s.loading = false;
            s.load_gen += 1;
            s.last_error = Some(err);
            let now = clock.monotonic();
            s.exhausted = exhausted.map(|why| (why, now));
            drop(s);
            entry.notify.notify_waiters();
            return;
        }
        let wait = backoff
            .map_or(FIRST_BACKOFF, |b| b.saturating_mul(2))
            .min(max);
        tracing::warn!(
            tag = %entry.tag,
            error = %err,
            retry_in = ?wait,
            "loading the next segment failed; serving from the buffer"
        );
        backoff = Some(wait);
        clock.sleep(wait).await;
    }
}
