//! The closed-loop clients: each waits for its answer before sending the next request, and
//! tallies what it was answered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{Limits, ProjectId};
use rand::{rngs::StdRng, Rng, SeedableRng};
use tokio::sync::Barrier;

use crate::driver::{Answer, Driver};

/// What one client did.
#[derive(Default)]
pub(crate) struct ClientTally {
    pub(crate) boots: u64,
    pub(crate) decisions: u64,
    pub(crate) denied: u64,
    pub(crate) errors: u64,
    pub(crate) granted_reserves: u64,
    pub(crate) latencies_us: Vec<u32>,
    /// The highest position acknowledged.
    pub(crate) max_position: u64,
    pub(crate) first_error: Option<String>,
}

impl ClientTally {
    fn record(&mut self, started: Instant, answer: &Answer) {
        self.decisions += 1;
        self.latencies_us
            .push(started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        match answer {
            Answer::Granted { position, .. } => {
                self.max_position = self.max_position.max(*position)
            }
            Answer::Denied => self.denied += 1,
            Answer::Failed(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| e.clone());
            }
        }
    }
}

/// Committed boots per project, by the project's index: shared by the clients, so that the
/// load generator's own bookkeeping stays a counter per project however long it runs (a map
/// per client grew towards clients × projects entries).
pub(crate) struct CommittedBoots(Vec<AtomicU64>);

impl CommittedBoots {
    pub(crate) fn new(projects: usize) -> Arc<CommittedBoots> {
        Arc::new(CommittedBoots(
            (0..projects).map(|_| AtomicU64::new(0)).collect(),
        ))
    }

    /// The projects with at least one committed boot, and how many.
    pub(crate) fn by_project(&self, projects: &[ProjectId]) -> HashMap<ProjectId, u64> {
        projects
            .iter()
            .zip(self.0.iter())
            .map(|(project, boots)| (project.clone(), boots.load(Ordering::Relaxed)))
            .filter(|(_, boots)| *boots > 0)
            .collect()
    }
}

/// Boots (a reserve, then its commit) on projects picked at random until the deadline.
pub(crate) async fn client_loop(
    driver: Arc<dyn Driver>,
    projects: Arc<Vec<ProjectId>>,
    committed: Arc<CommittedBoots>,
    seed: u64,
    deadline: Instant,
    progress: Arc<AtomicU64>,
) -> ClientTally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = ClientTally::default();
    while Instant::now() < deadline {
        let index = rng.gen_range(0..projects.len());
        let project = &projects[index];
        let started = Instant::now();
        let answer = driver.reserve(project).await;
        tally.record(started, &answer);
        let Answer::Granted { id, .. } = answer else {
            continue;
        };
        tally.granted_reserves += 1;
        let started = Instant::now();
        let answer = driver.commit(project, id).await;
        tally.record(started, &answer);
        if let Answer::Granted { .. } = answer {
            tally.boots += 1;
            committed.0[index].fetch_add(1, Ordering::Relaxed);
            progress.fetch_add(1, Ordering::Relaxed);
        }
    }
    tally
}

/// One reserve, sent when every client of the burst is ready.
pub(crate) async fn burst_client(
    driver: Arc<dyn Driver>,
    project: ProjectId,
    start: Arc<Barrier>,
) -> ClientTally {
    let mut tally = ClientTally::default();
    start.wait().await;
    let started = Instant::now();
    let answer = driver.reserve(&project).await;
    tally.record(started, &answer);
    if let Answer::Granted { .. } = answer {
        tally.granted_reserves += 1;
    }
    tally
}

pub(crate) async fn join_all(
    tasks: Vec<tokio::task::JoinHandle<ClientTally>>,
) -> Result<Vec<ClientTally>, String> {
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        tallies.push(task.await.map_err(|e| format!("client task failed: {e}"))?);
    }
    Ok(tallies)
}

/// Sets every project's limits before the load, from 16 tasks at once.
/// Gives each parent its limits and puts its children under it, 16 parents at a time.
pub(crate) async fn setup_tree(
    driver: &Arc<dyn Driver>,
    tree: &[(ProjectId, Vec<ProjectId>)],
    parent_limits: &Limits,
) -> Result<(), String> {
    if tree.is_empty() {
        return Ok(());
    }
    let parents: Vec<ProjectId> = tree.iter().map(|(p, _)| p.clone()).collect();
    setup_limits(driver, &parents, parent_limits).await?;
    for families in tree.chunks(16) {
        let tasks: Vec<_> = families
            .iter()
            .cloned()
            .map(|(parent, children)| {
                let driver = driver.clone();
                tokio::spawn(async move {
                    for child in &children {
                        driver.set_parent(child, &parent).await?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
    }
    Ok(())
}

pub(crate) async fn setup_limits(
    driver: &Arc<dyn Driver>,
    projects: &[ProjectId],
    limits: &Limits,
) -> Result<(), String> {
    let chunks: Vec<Vec<ProjectId>> = projects
        .chunks(projects.len().div_ceil(16))
        .map(<[_]>::to_vec)
        .collect();
    let tasks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let driver = driver.clone();
            let limits = limits.clone();
            tokio::spawn(async move {
                for project in &chunk {
                    driver.set_limits(project, &limits).await?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Prints the boots so far once a second until the deadline.
pub(crate) async fn report_progress(progress: Arc<AtomicU64>, started: Instant, deadline: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while Instant::now() < deadline {
        tick.tick().await;
        let boots = progress.load(Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "bench: {secs:>5.1} s  {boots:>9} boots  {:>9.0} boots/s",
            boots as f64 / secs
        );
    }
}
