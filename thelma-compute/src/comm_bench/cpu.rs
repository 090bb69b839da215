//! CPU mode of the benchmark: one thread per virtual device and ordinary host memory, under the same
//! protocol and barrier as the CUDA mode, so that the graph and buffer logic run in CI.

use std::sync::Arc;

use thelma_core::Placement;

use super::graph::{links, sides, Side};
use super::protocol::{
    check_side, for_each_word, read_parity, write_parity, write_side, HostLink, Shape,
};
use super::{run_workers, BenchConfig, CommError, Endpoint, Transport, WorkerReport};
use std::sync::atomic::Ordering;

/// One virtual device: its sides and, for the copy-engine transport, local staging copies.
struct CpuEndpoint {
    device: usize,
    /// Where the thread runs (hwloc).
    binding: String,
    shape: Shape,
    sides: Vec<Side>,
    memory: Arc<Vec<HostLink>>,
    transport: Transport,
    /// Copy-engine transport: per side, the local outgoing and incoming arrays.
    staging: Vec<(Vec<u32>, Vec<u32>)>,
    mismatches: Vec<u64>,
}

impl CpuEndpoint {
    fn new(cfg: &BenchConfig, device: usize, sides: Vec<Side>, memory: Arc<Vec<HostLink>>) -> Self {
        let words = cfg.shape.words();
        let staging = if cfg.transport == Transport::CopyEngine {
            sides
                .iter()
                .map(|_| (vec![0u32; words], vec![0u32; words]))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            device,
            binding: String::new(),
            shape: cfg.shape,
            mismatches: vec![0; sides.len()],
            sides,
            memory,
            transport: cfg.transport,
            staging,
        }
    }

    /// Copy-engine transport: the "kernel" works on local arrays; copies move them to and from the
    /// shared buffers, as the device↔host copies do on a GPU.
    fn exchange_staged(&mut self, t: u32) {
        let shape = self.shape;
        for (k, side) in self.sides.iter().enumerate() {
            let link = &self.memory[side.link];
            let (out, inc) = &mut self.staging[k];
            if t > 0 {
                // Host → device: the neighbour's buffer of the read parity into the local copy.
                let src = link.buffer(&shape, !side.writes_up, read_parity(t));
                for (d, s) in inc.iter_mut().zip(src) {
                    *d = s.load(Ordering::Relaxed);
                }
                let mut bad = 0u64;
                for_each_word(&shape, side.stream_in(), t - 1, |p, v| {
                    bad += u64::from(inc[p] != v)
                });
                self.mismatches[k] += bad;
            }
            for_each_word(&shape, side.stream_out(), t, |p, v| out[p] = v);
            // Device → host: the local array into this side's buffer of the write parity.
            let dst = link.buffer(&shape, side.writes_up, write_parity(t));
            for (d, s) in dst.iter().zip(out.iter()) {
                d.store(*s, Ordering::Relaxed);
            }
        }
    }
}

impl Endpoint for CpuEndpoint {
    fn exchange(&mut self, t: u32) -> Result<(), CommError> {
        match self.transport {
            Transport::CopyEngine => self.exchange_staged(t),
            _ => {
                for (k, side) in self.sides.iter().enumerate() {
                    let link = &self.memory[side.link];
                    write_side(link, &self.shape, side, t);
                    if t > 0 {
                        self.mismatches[k] += check_side(link, &self.shape, side, t);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), CommError> {
        Ok(())
    }

    fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError> {
        Ok(self
            .sides
            .iter()
            .zip(&self.mismatches)
            .map(|(s, &m)| (s.link, m))
            .collect())
    }

    fn describe(&self) -> String {
        format!("cpu:{} (host thread, {})", self.device, self.binding)
    }
}

/// Runs the benchmark on host threads. `peer` has no meaning without GPUs.
pub(super) fn run(cfg: &BenchConfig) -> Result<Vec<WorkerReport>, CommError> {
    if cfg.transport == Transport::Peer {
        return Err(CommError::Unsupported {
            transport: cfg.transport,
            reason: "peer-to-peer stores need GPUs (--backend cuda)".into(),
        });
    }
    let ls = links(cfg.devices.len(), cfg.topology);
    let memory = Arc::new(
        ls.iter()
            .map(|_| HostLink::new(&cfg.shape))
            .collect::<Vec<_>>(),
    );
    run_workers(cfg, |pos, barrier| {
        let binding = super::bind_worker(&Placement::Cores {
            share: pos,
            of: cfg.devices.len(),
        });
        let mut ep = CpuEndpoint::new(cfg, cfg.devices[pos], sides(&ls, pos), memory.clone());
        ep.binding = binding;
        super::drive(&mut ep, barrier, cfg)
    })
}

#[cfg(test)]
mod tests {
    use super::super::{summarise, Backend, Topology};
    use super::*;

    /// An endpoint that skips its stores at one iteration, as a lost transaction or a wrong parity
    /// would.
    struct Dropping {
        inner: CpuEndpoint,
        skip: u32,
    }

    impl Endpoint for Dropping {
        fn exchange(&mut self, t: u32) -> Result<(), CommError> {
            if t == self.skip {
                return Ok(());
            }
            self.inner.exchange(t)
        }
        fn finish(&mut self) -> Result<(), CommError> {
            self.inner.finish()
        }
        fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError> {
            self.inner.mismatches()
        }
        fn describe(&self) -> String {
            self.inner.describe()
        }
    }

    #[test]
    fn a_lost_iteration_is_reported_as_corruption_of_its_link() {
        for transport in [Transport::ZeroCopy, Transport::CopyEngine] {
            let cfg = BenchConfig {
                devices: vec![4, 7],
                topology: Topology::Linear,
                shape: Shape {
                    arrays: 2,
                    edge: 8,
                    transpose: false,
                },
                transport,
                iterations: 10,
                warmup: 2,
            };
            let ls = links(2, cfg.topology);
            let memory = Arc::new(
                ls.iter()
                    .map(|_| HostLink::new(&cfg.shape))
                    .collect::<Vec<_>>(),
            );
            let reports = run_workers(&cfg, |pos, barrier| {
                let inner =
                    CpuEndpoint::new(&cfg, cfg.devices[pos], sides(&ls, pos), memory.clone());
                // Device 7 (position 1) loses iteration 6: device 4 reads stale words at 7.
                let skip = if pos == 1 { 6 } else { u32::MAX };
                super::super::drive(&mut Dropping { inner, skip }, barrier, &cfg)
            })
            .unwrap();
            match summarise(Backend::Cpu, &cfg, &reports) {
                Err(CommError::Corrupted {
                    link: 0,
                    lower: 4,
                    upper: 7,
                    mismatches,
                }) => assert_eq!(mismatches, cfg.shape.words() as u64, "{transport}"),
                other => panic!("{transport}: {other:?}"),
            }
        }
    }
}
