//! A VFS for the writer's connection that hands a commit's WAL frames to the file in one write.
//!
//! SQLite writes each WAL frame with two `pwrite`s (its 24-byte header, then the page), and a
//! fleet commit of 16 decisions touches some 40 pages: about 80 system calls, each taking the
//! file's lock and walking the page cache for a kilobyte, a fifth of the writer's time
//! (docs/BENCHMARKS.md). This layer, in front of the default VFS, keeps the writes SQLite makes
//! to a WAL file in memory while each one continues the last, and hands them to the file as
//! one write before anything that must see them: a sync, a read, a truncation, a size, a file
//! control, a memory map, a write elsewhere in the file, or the file's close; and before more
//! than [`MAX_PENDING_BYTES`] would be waiting. Every other file (the database, its journal)
//! and every other call goes straight through.
//!
//! Why this is safe for the writer: with `synchronous=FULL` SQLite syncs the WAL before it
//! publishes a commit's frames to other connections (in the WAL index, shared memory the layer
//! does not touch), and that sync writes them out first. Frames written without a commit (a
//! transaction larger than the cache spilling pages) are read back by their own connection
//! only, through this layer, which writes them out before the read. Only connections that sync
//! every commit may use this VFS: with `synchronous=NORMAL` a commit is published unsynced,
//! and other connections would read frames still held here. The writer sets `FULL` before its
//! first write. A crash loses nothing a sync had not already made durable: what is held here
//! was only in the OS's memory before.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name the writer opens its connection with.
pub const VFS_NAME: &str = "quota-wal-batching";
const VFS_NAME_C: &std::ffi::CStr = c"quota-wal-batching";

/// Most bytes held, and so written at once. SQLite's unix VFS writes at most 128 KiB per call
/// (it masks the length to 17 bits, and answers SQLITE_FULL when what is left masks to 0), so
/// a write the layer makes stays under that; a fleet commit of 16 decisions is about 43 KiB.
pub const MAX_PENDING_BYTES: usize = 96 * 1024;
const UNIX_VFS_MAX_WRITE_BYTES: usize = 0x1ffff;
/// The largest page SQLite has: a single write SQLite makes to a WAL is at most this, so each
/// is held (and a larger one would still be written in one call).
const MAX_PAGE_BYTES: usize = 65_536;
const _: () =
    assert!(MAX_PAGE_BYTES <= MAX_PENDING_BYTES && MAX_PENDING_BYTES <= UNIX_VFS_MAX_WRITE_BYTES);

/// The writes SQLite asked for on WAL files through this layer, and those the layer made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalWriteCounts {
    pub asked: u64,
    pub issued: u64,
}

static ASKED: AtomicU64 = AtomicU64::new(0);
static ISSUED: AtomicU64 = AtomicU64::new(0);

/// The counts since the process started (all connections of this VFS together).
pub fn counts() -> WalWriteCounts {
    WalWriteCounts {
        asked: ASKED.load(Ordering::Relaxed),
        issued: ISSUED.load(Ordering::Relaxed),
    }
}

/// The default VFS this layer forwards to (this layer's own is registered once, never freed).
struct Registered {
    inner: *mut ffi::sqlite3_vfs,
}

// SAFETY: it points to SQLite's default VFS, which lives as long as the process and is only
// read.
unsafe impl Send for Registered {}
unsafe impl Sync for Registered {}

static REGISTERED: OnceLock<Result<Registered, String>> = OnceLock::new();

/// Registers the VFS (once) and answers its name, to open a connection with; or why it could
/// not be registered.
pub fn vfs_name() -> Result<&'static str, String> {
    match REGISTERED.get_or_init(register) {
        Ok(_) => Ok(VFS_NAME),
        Err(why) => Err(why.clone()),
    }
}

fn register() -> Result<Registered, String> {
    // SAFETY: the default VFS lives as long as the process; the layer's VFS is a copy of it
    // (as SQLite's own quota shim makes its VFS), leaked so it does too. Methods other than
    // `xOpen` receive the layer's VFS and read only what the copy holds.
    unsafe {
        let inner = ffi::sqlite3_vfs_find(std::ptr::null());
        if inner.is_null() {
            return Err("SQLite has no default VFS".into());
        }
        let mut vfs: ffi::sqlite3_vfs = std::ptr::read(inner);
        vfs.szOsFile = c_int::try_from(LAYER_BYTES)
            .ok()
            .and_then(|layer| layer.checked_add((*inner).szOsFile))
            .ok_or("the default VFS's file is too large")?;
        vfs.pNext = std::ptr::null_mut();
        vfs.zName = VFS_NAME_C.as_ptr();
        vfs.xOpen = Some(open);
        let vfs = Box::leak(Box::new(vfs));
        let code = ffi::sqlite3_vfs_register(vfs, 0);
        if code != ffi::SQLITE_OK {
            return Err(format!("SQLite refused the VFS (code {code})"));
        }
        Ok(Registered { inner })
    }
}

fn inner_vfs() -> *mut ffi::sqlite3_vfs {
    match REGISTERED.get() {
        Some(Ok(registered)) => registered.inner,
        // SQLite opens files through this VFS only once it is registered.
        _ => unreachable!("the VFS is used only once registered"),
    }
}

/// What SQLite allocates for each open file of this VFS: the layer's part, then the default
/// VFS's file at [`LAYER_BYTES`] from its start.
#[repr(C)]
struct LayerFile {
    /// First, as SQLite requires: the methods it calls are this layer's.
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    /// For a WAL file: the writes held, as one contiguous run of bytes.
    pending: Option<Pending>,
}

struct Pending {
    offset: i64,
    bytes: Vec<u8>,
}

/// The layer's part, rounded up so the default VFS's file after it stays aligned.
const LAYER_BYTES: usize = std::mem::size_of::<LayerFile>().next_multiple_of(16);

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const std::os::raw::c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let layer = file.cast::<LayerFile>();
    let inner = file
        .cast::<u8>()
        .add(LAYER_BYTES)
        .cast::<ffi::sqlite3_file>();
    // SQLite's memory for the file is not initialised; the methods stay null (so SQLite never
    // closes it) unless the default VFS opens it.
    std::ptr::write(
        layer,
        LayerFile {
            base: ffi::sqlite3_file {
                pMethods: std::ptr::null(),
            },
            inner,
            pending: None,
        },
    );
    let inner_vfs = inner_vfs();
    let Some(inner_open) = (*inner_vfs).xOpen else {
        return ffi::SQLITE_CANTOPEN;
    };
    let code = inner_open(inner_vfs, name, inner, flags, out_flags);
    if code != ffi::SQLITE_OK || (*inner).pMethods.is_null() {
        return code;
    }
    if flags & ffi::SQLITE_OPEN_WAL != 0 {
        (*layer).pending = Some(Pending {
            offset: 0,
            bytes: Vec::new(),
        });
    }
    (*layer).base.pMethods = &METHODS;
    ffi::SQLITE_OK
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

// SAFETY (for every function below): SQLite calls them with files `open` opened (each file
// from one connection at a time), and each forwards to the default VFS's file inside it.

unsafe fn layer<'a>(file: *mut ffi::sqlite3_file) -> &'a mut LayerFile {
    &mut *file.cast::<LayerFile>()
}

/// The method `$name` of the default VFS's file inside `$layer`.
macro_rules! inner_fn {
    ($layer:expr, $name:ident) => {
        (*(*$layer.inner).pMethods).$name
    };
}

/// Writes out what is held, if anything; answers SQLite's code.
unsafe fn flush(layer: &mut LayerFile) -> c_int {
    let Some(pending) = layer.pending.as_mut() else {
        return ffi::SQLITE_OK;
    };
    if pending.bytes.is_empty() {
        return ffi::SQLITE_OK;
    }
    let Some(write) = inner_fn!(layer, xWrite) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    ISSUED.fetch_add(1, Ordering::Relaxed);
    // At most MAX_PENDING_BYTES: it fits.
    let amount = c_int::try_from(pending.bytes.len()).unwrap_or(c_int::MAX);
    let code = write(
        layer.inner,
        pending.bytes.as_ptr().cast(),
        amount,
        pending.offset,
    );
    // Written or failed, it is no longer held: a failure fails the transaction.
    pending.bytes.clear();
    code
}

/// Writes out what is held, then answers what `forward` (the call passed on) answers; or the
/// write's failure, without passing the call on.
unsafe fn after_flush(
    file: *mut ffi::sqlite3_file,
    forward: impl FnOnce(&mut LayerFile) -> c_int,
) -> c_int {
    let layer = layer(file);
    match flush(layer) {
        ffi::SQLITE_OK => forward(layer),
        failed => failed,
    }
}

/// Passes a write on to the file unheld.
unsafe fn write_through(
    layer: &mut LayerFile,
    buffer: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    match inner_fn!(layer, xWrite) {
        Some(write) => write(layer.inner, buffer, amount, offset),
        None => ffi::SQLITE_IOERR_WRITE,
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    let layer = layer(file);
    let flushed = flush(layer);
    let closed = match inner_fn!(layer, xClose) {
        Some(close) => close(layer.inner),
        None => ffi::SQLITE_OK,
    };
    std::ptr::drop_in_place(file.cast::<LayerFile>());
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    buffer: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    after_flush(file, |layer| match inner_fn!(layer, xRead) {
        Some(read) => read(layer.inner, buffer, amount, offset),
        None => ffi::SQLITE_IOERR_READ,
    })
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    buffer: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let layer = layer(file);
    let Some(pending) = layer.pending.as_mut() else {
        return write_through(layer, buffer, amount, offset);
    };
    ASKED.fetch_add(1, Ordering::Relaxed);
    let Ok(length) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let continues = offset == pending.offset + pending.bytes.len() as i64;
    let fits = pending.bytes.len() + length <= MAX_PENDING_BYTES;
    let joins = pending.bytes.is_empty() || (continues && fits);
    if !joins {
        let code = flush(layer);
        if code != ffi::SQLITE_OK {
            return code;
        }
    }
    if length > MAX_PENDING_BYTES {
        ISSUED.fetch_add(1, Ordering::Relaxed);
        return write_through(layer, buffer, amount, offset);
    }
    let pending = layer.pending.as_mut().expect("a WAL file holds its writes");
    if pending.bytes.is_empty() {
        pending.offset = offset;
    }
    pending
        .bytes
        .extend_from_slice(std::slice::from_raw_parts(buffer.cast::<u8>(), length));
    ffi::SQLITE_OK
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    after_flush(file, |layer| match inner_fn!(layer, xTruncate) {
        Some(truncate) => truncate(layer.inner, size),
        None => ffi::SQLITE_IOERR_TRUNCATE,
    })
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    after_flush(file, |layer| match inner_fn!(layer, xSync) {
        Some(sync) => sync(layer.inner, flags),
        None => ffi::SQLITE_IOERR_FSYNC,
    })
}

unsafe extern "C" fn file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    after_flush(file, |layer| match inner_fn!(layer, xFileSize) {
        Some(file_size) => file_size(layer.inner, size),
        None => ffi::SQLITE_IOERR_FSTAT,
    })
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xLock) {
        Some(lock) => lock(layer.inner, level),
        None => ffi::SQLITE_IOERR_LOCK,
    }
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xUnlock) {
        Some(unlock) => unlock(layer.inner, level),
        None => ffi::SQLITE_IOERR_UNLOCK,
    }
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xCheckReservedLock) {
        Some(check) => check(layer.inner, out),
        None => ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
    }
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    argument: *mut c_void,
) -> c_int {
    after_flush(file, |layer| match inner_fn!(layer, xFileControl) {
        Some(control) => control(layer.inner, op, argument),
        None => ffi::SQLITE_NOTFOUND,
    })
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xSectorSize) {
        Some(sector_size) => sector_size(layer.inner),
        None => 4096,
    }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xDeviceCharacteristics) {
        Some(characteristics) => characteristics(layer.inner),
        None => 0,
    }
}

/// Whether the default VFS's file has the methods of `iVersion` `version` or later.
unsafe fn inner_has(layer: &LayerFile, version: c_int) -> bool {
    (*(*layer.inner).pMethods).iVersion >= version
}

unsafe extern "C" fn shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    region_bytes: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xShmMap).filter(|_| inner_has(layer, 2)) {
        Some(map) => map(layer.inner, region, region_bytes, extend, out),
        None => ffi::SQLITE_IOERR_SHMMAP,
    }
}

unsafe extern "C" fn shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    count: c_int,
    flags: c_int,
) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xShmLock).filter(|_| inner_has(layer, 2)) {
        Some(lock) => lock(layer.inner, offset, count, flags),
        None => ffi::SQLITE_IOERR_SHMLOCK,
    }
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    let layer = layer(file);
    if let Some(barrier) = inner_fn!(layer, xShmBarrier).filter(|_| inner_has(layer, 2)) {
        barrier(layer.inner)
    }
}

unsafe extern "C" fn shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xShmUnmap).filter(|_| inner_has(layer, 2)) {
        Some(unmap) => unmap(layer.inner, delete),
        None => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    after_flush(file, |layer| {
        match inner_fn!(layer, xFetch).filter(|_| inner_has(layer, 3)) {
            Some(fetch) => fetch(layer.inner, offset, amount, out),
            None => {
                // No memory map: SQLite reads instead.
                *out = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    })
}

unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    page: *mut c_void,
) -> c_int {
    let layer = layer(file);
    match inner_fn!(layer, xUnfetch).filter(|_| inner_has(layer, 3)) {
        Some(unfetch) => unfetch(layer.inner, offset, page),
        None => ffi::SQLITE_OK,
    }
}
