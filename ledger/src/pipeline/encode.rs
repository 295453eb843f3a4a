//! A domain event and its request's metadata, as the store is given them.

use domain::{Event, Timestamp};

use crate::store::{EventData, Metadata};

use crate::limits::MAX_METADATA_CHARS;

fn bounded(value: &Option<String>) -> Option<String> {
    value.as_ref().map(|s| {
        // A char is at least one byte, so a string no longer in bytes is within the bound.
        if s.len() <= MAX_METADATA_CHARS {
            s.clone()
        } else {
            s.chars().take(MAX_METADATA_CHARS).collect()
        }
    })
}

pub(super) fn event_data(event: &Event, meta: &Metadata, now: Timestamp) -> EventData {
    let metadata = Metadata {
        actor: bounded(&meta.actor),
        request_id: bounded(&meta.request_id),
        correlation_id: bounded(&meta.correlation_id),
        principal: bounded(&meta.principal),
    };
    EventData::encode(event, metadata, now)
}
