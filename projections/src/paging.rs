//! Keyset paging, shared by the audit, the reservation list and the project list: a page is
//! asked for by an opaque cursor (hex of a versioned prefix and the key it follows: a global
//! position, or a project id) and a size.

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
    encode_text(prefix, &position.to_string())
}

/// The position a cursor made by [`encode`] with `prefix` follows.
pub(crate) fn decode(prefix: &str, cursor: &str) -> Result<i64, ProjectionError> {
    decode_text(prefix, cursor)?
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or(ProjectionError::InvalidCursor)
}

/// The cursor after the key `last` (a list in key order): hex of the prefix and the key.
pub(crate) fn encode_text(prefix: &str, last: &str) -> String {
    hex::encode(format!("{prefix}{last}"))
}

/// The key a cursor made by [`encode_text`] with `prefix` carries, unchecked.
pub(crate) fn decode_text(prefix: &str, cursor: &str) -> Result<String, ProjectionError> {
    let bytes = hex::decode(cursor).map_err(|_| ProjectionError::InvalidCursor)?;
    let text = String::from_utf8(bytes).map_err(|_| ProjectionError::InvalidCursor)?;
    text.strip_prefix(prefix)
        .map(str::to_owned)
        .ok_or(ProjectionError::InvalidCursor)
}
