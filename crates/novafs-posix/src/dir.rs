//! Directory listings through a descriptor (readdir, rewinddir), in
//! batches: one core call fills many entries.

use novafs::DirEntry;

/// Entries fetched per core call.
const BATCH: usize = 64;

/// Where a listing stands: its end (names added after it started are
/// left out, so a listing ends however many renames run beside it, as
/// `Fs::readdir_to` explains), where the next batch starts, and the
/// entries of the current batch not yet returned.
#[derive(Default)]
pub(crate) struct Listing {
    end: Option<u64>,
    next: u64,
    batch: std::collections::VecDeque<DirEntry>,
    done: bool,
}

impl Listing {
    /// Back to the start (rewinddir, lseek to 0).
    pub(crate) fn rewind(&mut self) {
        *self = Listing::default();
    }

    /// The next entry, fetching a batch through `fetch(from, end, room)`
    /// when the current one is used up; None at the end.
    pub(crate) fn next(
        &mut self,
        end_now: impl FnOnce() -> novafs::Result<u64>,
        fetch: impl FnOnce(u64, u64, &mut dyn FnMut(DirEntry) -> bool) -> novafs::Result<()>,
    ) -> novafs::Result<Option<DirEntry>> {
        if self.batch.is_empty() && !self.done {
            let end = match self.end {
                Some(e) => e,
                None => *self.end.insert(end_now()?),
            };
            let batch = &mut self.batch;
            fetch(self.next, end, &mut |e| {
                batch.push_back(e);
                batch.len() >= BATCH
            })?;
            match self.batch.back() {
                Some(last) => self.next = last.next_offset,
                None => self.done = true,
            }
        }
        Ok(self.batch.pop_front())
    }
}
