//! Keyset paging, shared by the audit and the reservation list: a page is asked for by an
//! opaque cursor (hex of a versioned prefix and the global position it follows) and a size.

use crate::ProjectionError;

/// Where a page starts and how many rows it holds.
pub(crate) struct PageAsked {
    /// The position the page follows (0: from the start).
    pub after: i64,
    pub size: usize,
}

impl PageAsked {
    /// `cursor` must carry `prefix`; `limit` is clamped to 1..=`max`, `default` when absent.
    pub(crate) fn new(
        prefix: &str,
        cursor: Option<&str>,
        limit: Option<usize>,
        default: usize,
        max: usize,
    ) -> Result<PageAsked, ProjectionError> {
        let after = cursor.map(|c| decode(prefix, c)).transpose()?.unwrap_or(0);
        let size = limit.unwrap_or(default).clamp(1, max);
        Ok(PageAsked { after, size })
    }
}

/// The cursor after `position`: opaque to clients, versioned for us.
pub(crate) fn encode(prefix: &str, position: i64) -> String {
    hex::encode(format!("{prefix}{position}"))
}

/// The position a cursor made by [`encode`] with `prefix` follows.
pub(crate) fn decode(prefix: &str, cursor: &str) -> Result<i64, ProjectionError> {
    let bytes = hex::decode(cursor).map_err(|_| ProjectionError::InvalidCursor)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| ProjectionError::InvalidCursor)?;
    text.strip_prefix(prefix)
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .ok_or(ProjectionError::InvalidCursor)
}
