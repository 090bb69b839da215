//! thelma-core: the physics layer (stencils, collision operators, forcing), the case configuration,
//! partition maths, the compute-module trait and the multi-device runtime (the paper's "init"
//! module).
//!
//! Modules are private and the crate root re-exports what other crates use, so that the compiler
//! reports whatever nothing uses. `physics` stays a namespace: its names (`D3Q19`, `Bgk`) read best
//! qualified.

mod affinity;
pub mod block;
mod cluster;
mod compute;
mod config;
mod domain;
mod numfmt;
pub mod physics;
mod real;
mod runtime;
mod transport;

pub use affinity::{bind_current_thread, core_count, pci_locality, AffinityError, Binding};
pub use cluster::{
    command_tag, exchange_tag, Cluster, ClusterError, Incoming, Layout, LocalCluster, Outgoing,
    Tag, MAX_SLABS_PER_RANK,
};
pub use compute::{
    check_node_forces, check_nodes, plane_axes, slab_bytes, thermal_slab_bytes, ChangeSums,
    ComputeError, ComputeModule, Fields, Health, MeanSums, MemoryInfo, ModuleFactory, Placement,
    PlaneFields, PointForces, StepPart,
};
pub use config::{
    Axis, BackendName, BodyConfig, BodyMethod, BoundaryConfig, BoundaryKind, CaseConfig,
    CaseFileError, CaseKind, ConfigError, DeviceSpec, DeviceSpecError, DomainConfig, Expression,
    Face, FacePatch, ForcesConfig, HardwareConfig, InitialConfig, InitialState, InletSchedule,
    LatticeParams, LineConfig, NumericsConfig, Obstacle, OutputConfig, OutputField, PatchConfig,
    PhysicalUnits, PhysicsConfig, ProbeConfig, Profile, RotationConfig, RunConfig, Scale,
    SlicePlane, SlicePlaneError, SpongeConfig, Streaming, SyntaxError, ThermalConfig, UnitScales,
    ABSOLUTE_ZERO_C, DEFAULT_RETRACTION, MAX_THREADS, WALL_SLOTS,
};
pub use domain::{
    partition, side_of, side_populations, Domain, PartitionError, SlabSpec, SubdomainOf, SIDES,
    SIDE_COUNT,
};
pub use numfmt::{num, num_exact, num_sig, Num};
pub use real::{Half12, Precision, Real, ScaledHalf, Stored};
pub use runtime::{
    overlap_wanted, Aborted, Averaging, DeviceInfo, RunStats, Runtime, RuntimeError, StepBarrier,
    WorkerTimes,
};
pub use transport::{
    channel_offset, gpu_transport, plan as plan_transports, Channel, DevicePair, Links,
    SlabTransports, Transport, TransportChoice, TransportRefused, UnknownTransport,
};
