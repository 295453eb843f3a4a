//! The names of the embedded store's threads: set where each thread is started, read by
//! whatever attributes work to them (the bench's CPU split, profiles). Linux keeps only the
//! first [`VISIBLE_BYTES`] bytes of a thread's name, and the names differ within those.

/// The bytes of a thread's name the kernel keeps (`TASK_COMM_LEN`, 16, less the NUL).
pub const VISIBLE_BYTES: usize = 15;

/// The thread that reads pages of the feed for the views and the sweeper.
pub const FEED: &str = "quota-sqlite-feed";
/// The connection that flushes the WAL into the database file.
pub const WAL_FLUSH: &str = "quota-sqlite-fl";
/// The read pool's connections (streams, heads, the checking tools).
pub const READER: &str = "quota-sqlite-rd";
/// The connection that hands the database to the views and the admin commands.
pub const ADMIN: &str = "quota-sqlite-ad";

/// What the kernel shows of a thread named `name`.
pub fn as_visible(name: &str) -> &str {
    name.get(..VISIBLE_BYTES).unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_differ_in_what_the_kernel_keeps() {
        let all = [FEED, WAL_FLUSH, READER, ADMIN];
        let visible: std::collections::HashSet<&str> = all.iter().map(|n| as_visible(n)).collect();
        assert_eq!(visible.len(), all.len());
        assert_eq!(as_visible(FEED), "quota-sqlite-fe");
        assert_eq!(as_visible("short"), "short");
    }
}
