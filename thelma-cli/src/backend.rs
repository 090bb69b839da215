//! Choosing the compute module for a run through `thelma-compute`'s registry: a module by name, or
//! `auto` (the first registered module that finds a device, said in the run's first line).

use std::sync::Arc;

use anyhow::Result;
use thelma_compute::{BackendError, Choice, Devices, ModelParams, Tuning};
use thelma_core::{
    plan_transports, BackendName, CaseConfig, DeviceSpec, Domain, Layout, ModuleFactory,
};

use crate::cluster::{HostPlace, Job};
use crate::error::UsageError;
use crate::layout::LayoutFile;

/// The factory serving a run, this process's devices in slab order, the layout of every slab, and
/// what was decided (for the user).
pub struct Selection {
    pub factory: Arc<dyn ModuleFactory>,
    pub devices: Vec<usize>,
    pub layout: Layout,
    /// This process's rank (0 outside a cluster job).
    pub rank: usize,
    /// Whether the modules keep their lattices in host memory (the host's memory is then checked).
    pub host: bool,
    pub note: String,
}

/// Refuses, before anything is allocated or written, a transport that cannot join two of the
/// slabs of rank `rank` (0 outside a cluster job) (`--transport device` across GPUs, `peer` without peer access, a GPU transport on
/// the CPU). A device list the partition refuses is left to `preflight`, which names it.
pub fn check_transport(factory: &dyn ModuleFactory, layout: &Layout, rank: usize) -> Result<()> {
    plan_transports(
        &layout.slabs,
        &layout.devices,
        &layout.ranks,
        rank,
        |r, w| factory.transport(r, w),
    )
    .map_err(|e| {
        UsageError::new(
            "--transport",
            format!("{} cannot serve this run: {}", e.asked, e.why),
        )
    })?;
    Ok(())
}

/// The devices each rank of a job runs under `--devices` `spec` on a backend of physical devices,
/// `count` visible to each rank, by rank (`hosts`: every rank's place on its host): the ranks
/// sharing a host deal its devices in runs, the rank of index k taking the k-th run, of `N`
/// devices for a count `N` and of an even share for `all` (the least share over the job's hosts,
/// so every rank runs as many slabs; where that is none, every rank of the job takes all of its
/// host's devices); an explicit list is every rank's as given. Where a host's
/// devices cannot give each of its ranks a run of its own (more ranks than GPUs, or a launcher
/// that shows each rank only its own GPU), its ranks share them: every rank takes the first `N`,
/// or all of them, as one process would.
pub fn deal_devices(spec: &DeviceSpec, count: usize, hosts: &[HostPlace]) -> Vec<Vec<usize>> {
    let each = match spec {
        DeviceSpec::List(ids) => return vec![ids.clone(); hosts.len()],
        DeviceSpec::Count(n) => *n,
        // The least share is that of the host with the most ranks.
        DeviceSpec::All => match count / hosts.iter().map(|h| h.ranks).max().unwrap_or(1).max(1) {
            0 => count,
            share => share,
        },
    };
    hosts
        .iter()
        .map(|h| {
            let own = h.ranks.saturating_mul(each) <= count;
            let first = if own { h.index * each } else { 0 };
            (first..first + each).collect()
        })
        .collect()
}

/// Gives each slab of `layout` the device of its place among its rank's slabs in that rank's
/// dealt run `lists[rank]` (as `Layout::spread` gives it the place in the device list).
fn take_dealt(layout: &mut Layout, lists: &[Vec<usize>]) {
    let places = layout.places();
    for (s, d) in layout.devices.iter_mut().enumerate() {
        *d = lists[layout.ranks[s]][places[s]];
    }
}

/// Picks the backend the case names and lays the domain out: the layout file's slabs, or an
/// even split over the device list (on each rank of a cluster job `job`); this process's
/// devices are those of its slabs.
pub fn select(case: &CaseConfig, params: ModelParams, job: Option<&Job>) -> Result<Selection> {
    let hw = &case.hardware;
    let choice = choose(&hw.backend)?;
    let domain = Domain::new(case.domain.size, case.domain.periodic);
    let (ranks, rank) = job.map_or((1, 0), |j| (j.size(), j.rank()));
    let layout = match &hw.layout {
        Some(file) => LayoutFile::read(file)?.layout(domain)?,
        None => {
            let mut devices = resolve(&choice, &hw.devices)?;
            // Ranks sharing a host share its GPUs: each takes its own run of them.
            let dealt = match (job, choice.devices) {
                (Some(job), Devices::Physical { count }) => {
                    Some(deal_devices(&hw.devices, count, job.hosts()))
                }
                _ => None,
            };
            if let Some(lists) = &dealt {
                devices = lists[rank].clone();
            }
            crate::preflight::check_devices(case, &devices)?;
            let mut layout = Layout::spread(domain, ranks, &devices)
                .map_err(|e| UsageError::new("--devices", e.to_string()))?;
            if let Some(lists) = dealt {
                take_dealt(&mut layout, &lists);
            }
            layout
        }
    };
    if layout.rank_count() != ranks {
        let named = layout.rank_count();
        return Err(UsageError::new(
            "--layout",
            format!(
                "the layout names {named} rank(s), and {ranks} process(es) run (mpirun -np {named})"
            ),
        )
        .into());
    }
    let devices: Vec<usize> = layout
        .local(rank)
        .iter()
        .map(|&s| layout.devices[s])
        .collect();
    if let Some(d) = devices
        .iter()
        .enumerate()
        .find_map(|(k, d)| devices[..k].contains(d).then_some(d))
    {
        return Err(UsageError::new(
            "--layout",
            format!("rank {rank} runs two subdomains on device {d}: one per device"),
        )
        .into());
    }
    if hw.layout.is_some() && !choice.backend.host {
        // The ids must name GPUs of this host.
        let known = resolve(&choice, &DeviceSpec::All)?;
        if let Some(d) = devices.iter().find(|d| !known.contains(d)) {
            return Err(UsageError::new(
                "--layout",
                format!(
                    "device {d} of rank {rank}: the {} backend has devices {known:?}",
                    choice.backend.name
                ),
            )
            .into());
        }
    }
    let tuning = Tuning {
        threads: hw.threads,
        transport: hw.transport,
        ..Tuning::default()
    };
    let factory = choice
        .factory(params, devices.len(), &tuning)
        .map_err(|e| UsageError::new("--backend", e.to_string()))?;
    check_transport(factory.as_ref(), &layout, rank)?;
    Ok(Selection {
        factory,
        devices,
        layout,
        rank,
        host: choice.backend.host,
        note: choice.note,
    })
}

/// The registry's choice for `name`; a name that is unknown, or whose devices are missing, is bad
/// input of `--backend`.
pub fn choose(name: &BackendName) -> Result<Choice> {
    thelma_compute::choose(name).map_err(|e| {
        let e = match e {
            // `hardware.backend` in a case file reaches here unchecked by the argument parser.
            e @ BackendError::Unknown { .. } => e.to_string(),
            BackendError::Unavailable { name, reason } => format!("{name}: {reason}"),
        };
        UsageError::new("--backend", e).into()
    })
}

/// The devices `spec` names on the chosen backend, in slab order. Duplicates and the planes per
/// device are checked, for every backend, by `preflight`.
pub fn resolve(choice: &Choice, spec: &DeviceSpec) -> Result<Vec<usize>> {
    Ok(choice
        .resolve(spec)
        .map_err(|e| UsageError::new("--devices", e.to_string()))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(places: &[(usize, usize)]) -> Vec<HostPlace> {
        places
            .iter()
            .map(|&(index, ranks)| HostPlace { index, ranks })
            .collect()
    }

    /// Each slab of a spread layout takes its rank's dealt device for its place there.
    #[test]
    fn each_slab_takes_its_ranks_dealt_device() {
        let domain = Domain::new([8, 8, 16], [false; 3]);
        let mut layout = Layout::spread(domain, 2, &[0, 1]).unwrap();
        take_dealt(&mut layout, &[vec![0, 1], vec![2, 3]]);
        assert_eq!(layout.ranks, vec![0, 0, 1, 1]);
        assert_eq!(layout.devices, vec![0, 1, 2, 3]);
    }

    /// Ranks sharing a host take their own runs of its GPUs; a host of one rank takes them as one
    /// process does; an explicit list is every rank's; a host with too few GPUs for a run per rank
    /// shares them.
    #[test]
    fn the_ranks_of_a_host_deal_its_devices() {
        // Four ranks on one host of 8 GPUs, 2 each; then `all`: an even share.
        let four = hosts(&[(0, 4), (1, 4), (2, 4), (3, 4)]);
        let two_each = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]];
        assert_eq!(deal_devices(&DeviceSpec::Count(2), 8, &four), two_each);
        assert_eq!(deal_devices(&DeviceSpec::All, 8, &four), two_each);
        // Two hosts of two ranks (ranks 0 and 1 first on theirs), one GPU each.
        let two_hosts = hosts(&[(0, 2), (0, 2), (1, 2), (1, 2)]);
        assert_eq!(
            deal_devices(&DeviceSpec::Count(1), 4, &two_hosts),
            vec![vec![0], vec![0], vec![1], vec![1]]
        );
        // One rank per host: every device, as one process.
        let alone = hosts(&[(0, 1), (0, 1)]);
        assert_eq!(
            deal_devices(&DeviceSpec::All, 3, &alone),
            vec![vec![0, 1, 2]; 2]
        );
        // Uneven hosts under `all`: the least share, so every rank runs as many slabs.
        let uneven = hosts(&[(0, 1), (0, 2), (1, 2)]);
        assert_eq!(
            deal_devices(&DeviceSpec::All, 4, &uneven),
            vec![vec![0, 1], vec![0, 1], vec![2, 3]]
        );
        // A list is the user's pick, on every rank.
        assert_eq!(
            deal_devices(&DeviceSpec::List(vec![3, 1]), 4, &four),
            vec![vec![3, 1]; 4]
        );
        // Too few GPUs for a run each: shared, as one process takes them (four ranks on one
        // GPU; a launcher showing each rank only its own).
        assert_eq!(deal_devices(&DeviceSpec::All, 1, &four), vec![vec![0]; 4]);
        assert_eq!(
            deal_devices(&DeviceSpec::Count(1), 1, &four),
            vec![vec![0]; 4]
        );
        assert_eq!(
            deal_devices(&DeviceSpec::Count(3), 8, &four),
            vec![vec![0, 1, 2]; 4]
        );
        // Under `all`, a host of one rank beside one of four, 8 GPUs each: the least share, two.
        let mixed = hosts(&[(0, 1), (0, 4), (1, 4), (2, 4), (3, 4)]);
        let dealt = deal_devices(&DeviceSpec::All, 8, &mixed);
        assert_eq!((&dealt[0], &dealt[4]), (&vec![0, 1], &vec![6, 7]));
    }
}
