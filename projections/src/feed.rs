//! Reading the global feed for the views. The events belong to the write side, so they are
//! read only through the store's own reader ([`EventStore::read_feed`]), and each is decoded
//! with the domain's codec. An event that does not decode fails the read: the views never skip
//! an event. The follower retries such a batch and reports it (see `follower`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use domain::{Event, Timestamp};
use ledger::store::MAX_READ_COUNT;
use ledger::{EventStore, Metadata, Position};

use crate::ProjectionError;

/// One decoded event of the feed.
#[derive(Clone, Debug)]
pub(crate) struct FeedEvent {
    pub position: Position,
    pub stream: String,
    pub version: u64,
    pub recorded_at: Timestamp,
    pub metadata: Metadata,
    pub event: Event,
}

/// The views' reader of the feed.
#[derive(Clone)]
pub(crate) struct Feed {
    store: Arc<dyn EventStore>,
    /// Test hook (see `Projections::drop_event_from_feed`): a position this reader leaves out,
    /// as a buggy reader would; 0 for none.
    dropped: Arc<AtomicU64>,
}

impl Feed {
    pub(crate) fn new(store: Arc<dyn EventStore>) -> Feed {
        Feed {
            store,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn drop_position(&self, position: Position) {
        self.dropped.store(position, Ordering::SeqCst);
    }

    /// Events in (`after`, `until`], at most `max`, in position order, every one decoded;
    /// and the last position read (`None` when there was nothing). An event that does not
    /// decode fails the read; with `up_to_unreadable`, only if it comes first: otherwise the
    /// events before it are returned, so the views stop right before it.
    pub(crate) async fn read(
        &self,
        after: Position,
        until: Position,
        max: usize,
        up_to_unreadable: bool,
    ) -> Result<(Vec<FeedEvent>, Option<Position>), ProjectionError> {
        let mut events = Vec::with_capacity(max.min(16_384));
        let mut last = None;
        let mut read = 0;
        while read < max && last.unwrap_or(after) < until {
            let wanted = (max - read).min(MAX_READ_COUNT);
            let page = self.store.read_feed(last.unwrap_or(after), wanted).await?;
            let complete = page.len() < wanted;
            for stored in page {
                if stored.position > until {
                    return Ok((events, last));
                }
                read += 1;
                let event = match stored.decode() {
                    Ok(event) => event,
                    Err(_) if up_to_unreadable && last.is_some() => return Ok((events, last)),
                    Err(error) => {
                        return Err(ProjectionError::Undecodable {
                            position: stored.position,
                            message: error.to_string(),
                        })
                    }
                };
                last = Some(stored.position);
                if stored.position == self.dropped.load(Ordering::Relaxed) {
                    continue;
                }
                events.push(FeedEvent {
                    position: stored.position,
                    stream: stored.stream,
                    version: stored.version,
                    recorded_at: stored.recorded_at,
                    metadata: stored.metadata,
                    event,
                });
            }
            if complete {
                break;
            }
        }
        Ok((events, last))
    }
}
