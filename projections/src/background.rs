//! Where the views are written: one thread of its own, at a lower CPU priority than the rest of
//! the process, with its own single-threaded runtime.
//!
//! Views follow the ledger; they must never slow it. On a machine with few cores the ledger's
//! group commit is a chain of short steps (wake on fsync, read, insert, fsync again), and every
//! time a view batch holds the core the next step waits (docs/BENCHMARKS.md, "Figures behind
//! the code", has the measurement). The views still get every cycle the ledger leaves idle, and batch more when they fall behind
//! (so they catch up faster than they fell behind).
//!
//! What runs here: the follower and the startup rebuild, and the creation of the connections
//! only they use. SQLite runs each connection on a thread of its own, spawned by whichever
//! thread opens it, and a thread inherits its creator's priority: so those connections are
//! opened from here. Queries from clients keep their own connections, at normal priority.

use std::future::Future;
use std::sync::OnceLock;

use crate::limits::VIEWS_NICE_INCREMENT;
use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

const MAX_NICE: i32 = 19;

fn handle() -> &'static Handle {
    static HANDLE: OnceLock<Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(crate::thread_names::VIEWS.into())
            .spawn(move || {
                lower_priority_of_this_thread();
                let runtime = Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds");
                sender
                    .send(runtime.handle().clone())
                    .expect("the starter waits for the handle");
                // Lives as long as the process: tasks come and go on it.
                runtime.block_on(std::future::pending::<()>());
            })
            .expect("the views thread starts");
        receiver.recv().expect("the views thread sends its handle")
    })
}

/// Runs `task` on the views thread.
pub(crate) fn spawn<F>(task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(task)
}

#[cfg(target_os = "linux")]
fn lower_priority_of_this_thread() {
    // On Linux a nice value belongs to a thread, and threads created later inherit it.
    // SAFETY: plain system calls on this thread's own id, no memory is passed.
    let result = unsafe {
        let thread_id = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let nice = libc::getpriority(libc::PRIO_PROCESS, thread_id);
        libc::setpriority(
            libc::PRIO_PROCESS,
            thread_id,
            (nice + VIEWS_NICE_INCREMENT).min(MAX_NICE),
        )
    };
    if result != 0 {
        tracing::debug!("could not lower the views thread's priority; it runs at normal priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority_of_this_thread() {
    // Elsewhere a nice value may belong to the whole process: leave it alone.
    let _ = (VIEWS_NICE_INCREMENT, MAX_NICE);
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_views_thread_and_the_threads_it_starts_run_at_lower_priority() {
        fn nice_of_this_thread() -> i32 {
            // SAFETY: as above.
            unsafe {
                let thread_id = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::getpriority(libc::PRIO_PROCESS, thread_id)
            }
        }
        let normal = nice_of_this_thread();
        let on_views_thread = super::spawn(async { nice_of_this_thread() }).await.unwrap();
        let started_there =
            super::spawn(async { std::thread::spawn(nice_of_this_thread).join().unwrap() })
                .await
                .unwrap();
        let expected = (normal + super::VIEWS_NICE_INCREMENT).min(super::MAX_NICE);
        assert_eq!(on_views_thread, expected);
        assert_eq!(started_there, on_views_thread);
    }
}
