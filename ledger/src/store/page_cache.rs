//! SQLite's own page cache, with one needless full scan taken out of every commit.
//!
//! When a B-tree page splits, SQLite puts the sibling pages in page-number order by moving
//! them through a spare key: the number of the lock-byte page, 1,048,577 for 1 KiB pages
//! (`balance_nonroot`, "this one optimization makes the database about 25% faster"). The page
//! cache remembers that key as the largest it has seen, and at the end of the transaction the
//! pager truncates the cache to the database's size. Finding the largest key far past the end,
//! the cache scans every slot of its hash table and every page in it, to find nothing: the
//! swapped pages are long back at their own numbers. A fleet's appends split a leaf of the
//! (stream, version) index in most commits, so most commits paid a scan as long as the cache:
//! 4 % of the writer's time with SQLite's default 2 MiB cache, a third of it with a 32 MiB one
//! (docs/BENCHMARKS.md). A database past 1 GiB has its pages beyond the spare key and never
//! scans.
//!
//! [`install`] puts a thin layer in front of SQLite's default cache, for every connection of
//! the process. It forwards every call unchanged, but tracks the largest key a page can have
//! (every key a page was created at or moved to, leaving out the spare key once a page has
//! moved on from it) and drops a truncation that can find nothing: one whose limit is above
//! that largest key. Any other truncation is forwarded. Nothing else changes: which pages are
//! kept, evicted or written is still decided by SQLite's cache.

use std::os::raw::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

/// SQLite's `PENDING_BYTE`: the offset of the byte range used for file locks, whose page is
/// never stored and serves as the spare key (`PENDING_BYTE/pageSize + 1`).
const PENDING_BYTE: u64 = 0x4000_0000;

/// SQLite's default page cache, as it was before [`install`] put this layer in front of it:
/// stored before the layer is, so that no call through the layer can come before it.
static DEFAULT_METHODS: OnceLock<DefaultMethods> = OnceLock::new();

/// Whether [`install`] put the layer in place.
static INSTALLED: OnceLock<bool> = OnceLock::new();

struct DefaultMethods(ffi::sqlite3_pcache_methods2);

// SAFETY: the struct holds SQLite's function pointers and its (null or static) argument,
// written once before the layer is installed and only read after.
unsafe impl Send for DefaultMethods {}
unsafe impl Sync for DefaultMethods {}

/// One connection's cache: SQLite's, and the largest key a page of it can have.
struct Cache {
    inner: *mut ffi::sqlite3_pcache,
    /// The spare key of this cache's page size.
    spare_key: c_uint,
    /// No page has a key above this one (except at the spare key, while `spare_in_use`).
    max_key: c_uint,
    spare_in_use: bool,
}

/// Installs the layer for every SQLite connection of this process, once. It only can before
/// SQLite is first initialised (the first connection opened); if SQLite is already in use it
/// stays as it is, and `false` is returned. SQLite's configuration is not thread-safe: call
/// it before any other thread may use SQLite, as `quota`'s `main` does first thing (the call
/// in `SqliteStore::open` covers library users that do not).
pub fn install() -> bool {
    *INSTALLED.get_or_init(install_once)
}

fn install_once() -> bool {
    // SAFETY: `sqlite3_config` is called with the argument type each option documents. Both
    // calls fail harmlessly (SQLITE_MISUSE) if SQLite was initialised already.
    unsafe {
        let mut default: ffi::sqlite3_pcache_methods2 = std::mem::zeroed();
        let got = ffi::sqlite3_config(
            ffi::SQLITE_CONFIG_GETPCACHE2,
            &mut default as *mut ffi::sqlite3_pcache_methods2,
        );
        if got != ffi::SQLITE_OK || default.xCreate.is_none() {
            tracing::debug!(code = got, "SQLite's page cache is left as it is");
            return false;
        }
        if DEFAULT_METHODS.set(DefaultMethods(default)).is_err() {
            return false;
        }
        let layered = layered_methods();
        // SQLite copies the struct.
        let set = ffi::sqlite3_config(
            ffi::SQLITE_CONFIG_PCACHE2,
            &layered as *const ffi::sqlite3_pcache_methods2,
        );
        if set != ffi::SQLITE_OK {
            tracing::debug!(code = set, "SQLite's page cache is left as it is");
            return false;
        }
        true
    }
}

fn layered_methods() -> ffi::sqlite3_pcache_methods2 {
    ffi::sqlite3_pcache_methods2 {
        iVersion: 1,
        pArg: std::ptr::null_mut(),
        xInit: Some(init),
        xShutdown: Some(shutdown),
        xCreate: Some(create),
        xCachesize: Some(cache_size),
        xPagecount: Some(page_count),
        xFetch: Some(fetch),
        xUnpin: Some(unpin),
        xRekey: Some(rekey),
        xTruncate: Some(truncate),
        xDestroy: Some(destroy),
        xShrink: Some(shrink),
    }
}

fn default_methods() -> &'static ffi::sqlite3_pcache_methods2 {
    match DEFAULT_METHODS.get() {
        Some(methods) => &methods.0,
        // SQLite calls these only once `install_once` stored the defaults and set the layer.
        None => unreachable!("the page cache layer runs only once installed"),
    }
}

/// The function `$name` of SQLite's default cache; it always has every one.
macro_rules! default_fn {
    ($name:ident) => {
        default_methods().$name.expect(concat!(
            "SQLite's default page cache has ",
            stringify!($name)
        ))
    };
}

// SAFETY (for every function below): SQLite calls them as its page cache methods, with the
// handles `create` returned, each cache from one connection at a time; each forwards to the
// default cache with that cache's own handle.

unsafe extern "C" fn init(_: *mut c_void) -> c_int {
    default_fn!(xInit)(default_methods().pArg)
}

unsafe extern "C" fn shutdown(_: *mut c_void) {
    default_fn!(xShutdown)(default_methods().pArg)
}

unsafe extern "C" fn create(
    page_bytes: c_int,
    extra_bytes: c_int,
    purgeable: c_int,
) -> *mut ffi::sqlite3_pcache {
    let inner = default_fn!(xCreate)(page_bytes, extra_bytes, purgeable);
    if inner.is_null() {
        return inner;
    }
    let page_bytes = u64::try_from(page_bytes).unwrap_or(1).max(1);
    let spare_key = c_uint::try_from(PENDING_BYTE / page_bytes + 1).unwrap_or(c_uint::MAX);
    let cache = Box::new(Cache {
        inner,
        spare_key,
        max_key: 0,
        spare_in_use: false,
    });
    Box::into_raw(cache).cast()
}

/// The layer's state of a cache handle `create` returned.
unsafe fn cache<'a>(handle: *mut ffi::sqlite3_pcache) -> &'a mut Cache {
    &mut *handle.cast::<Cache>()
}

unsafe extern "C" fn cache_size(handle: *mut ffi::sqlite3_pcache, pages: c_int) {
    default_fn!(xCachesize)(cache(handle).inner, pages)
}

unsafe extern "C" fn page_count(handle: *mut ffi::sqlite3_pcache) -> c_int {
    default_fn!(xPagecount)(cache(handle).inner)
}

unsafe extern "C" fn fetch(
    handle: *mut ffi::sqlite3_pcache,
    key: c_uint,
    create: c_int,
) -> *mut ffi::sqlite3_pcache_page {
    let cache = cache(handle);
    if create != 0 {
        cache.note_key(key);
    }
    default_fn!(xFetch)(cache.inner, key, create)
}

unsafe extern "C" fn unpin(
    handle: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    discard: c_int,
) {
    default_fn!(xUnpin)(cache(handle).inner, page, discard)
}

unsafe extern "C" fn rekey(
    handle: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    old_key: c_uint,
    new_key: c_uint,
) {
    let cache = cache(handle);
    cache.moved(old_key, new_key);
    default_fn!(xRekey)(cache.inner, page, old_key, new_key)
}

unsafe extern "C" fn truncate(handle: *mut ffi::sqlite3_pcache, limit: c_uint) {
    let cache = cache(handle);
    if cache.holds_none_from(limit) {
        return;
    }
    default_fn!(xTruncate)(cache.inner, limit);
    cache.truncated(limit);
}

unsafe extern "C" fn destroy(handle: *mut ffi::sqlite3_pcache) {
    let cache = Box::from_raw(handle.cast::<Cache>());
    default_fn!(xDestroy)(cache.inner)
}

unsafe extern "C" fn shrink(handle: *mut ffi::sqlite3_pcache) {
    default_fn!(xShrink)(cache(handle).inner)
}

impl Cache {
    /// A page may now be at `key`.
    fn note_key(&mut self, key: c_uint) {
        if key == self.spare_key {
            self.spare_in_use = true;
        } else {
            self.max_key = self.max_key.max(key);
        }
    }

    /// The page at `old_key` is now at `new_key`.
    fn moved(&mut self, old_key: c_uint, new_key: c_uint) {
        if old_key == self.spare_key {
            self.spare_in_use = false;
        }
        self.note_key(new_key);
    }

    /// Whether no page can be at `limit` or above.
    fn holds_none_from(&self, limit: c_uint) -> bool {
        let spare_clear = !self.spare_in_use || self.spare_key < limit;
        spare_clear && self.max_key < limit
    }

    /// Every page at `limit` or above was dropped.
    fn truncated(&mut self, limit: c_uint) {
        if limit <= self.spare_key {
            self.spare_in_use = false;
        }
        self.max_key = self.max_key.min(limit.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> Cache {
        Cache {
            inner: std::ptr::null_mut(),
            spare_key: 1_048_577,
            max_key: 0,
            spare_in_use: false,
        }
    }

    #[test]
    fn a_truncation_past_every_key_is_dropped_and_one_below_is_not() {
        let mut cache = cache();
        cache.note_key(40);
        assert!(cache.holds_none_from(41));
        assert!(!cache.holds_none_from(40));
        assert!(!cache.holds_none_from(1));
        cache.truncated(20);
        assert!(cache.holds_none_from(20));
        assert!(!cache.holds_none_from(19));
    }

    #[test]
    fn the_spare_key_counts_only_while_a_page_is_at_it() {
        let mut cache = cache();
        cache.note_key(40);
        cache.note_key(39);
        // A split's swap of pages 40 and 39: 40 moves to the spare key, 39 into 40's place,
        // then the first moves on to 39.
        cache.moved(40, 1_048_577);
        assert!(!cache.holds_none_from(41));
        cache.moved(39, 40);
        assert!(!cache.holds_none_from(41));
        cache.moved(1_048_577, 39);
        assert!(cache.holds_none_from(41));
        assert_eq!(cache.max_key, 40);
    }

    #[test]
    fn a_truncation_below_the_spare_key_drops_a_page_at_it() {
        let mut cache = cache();
        cache.note_key(1_048_577);
        cache.truncated(10);
        assert!(!cache.spare_in_use);
        assert!(cache.holds_none_from(10));
    }
}
