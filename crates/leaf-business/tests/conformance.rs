//! The business-tag cases against the in-memory reference store (every real store runs them
//! in its own crate: `period_conformance!`).

leaf_testkit::period_conformance!(memory, async { leaf_testkit::MemoryFixture::default() });
