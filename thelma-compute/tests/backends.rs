//! The backend registry: names, the order `auto` tries, and device lists checked against what a
//! backend has. An integration test, like `cpu_rows.rs`: the registry's entries build every
//! module, so a unit test reaching it would compile every CPU row into the unit-test harness.

use thelma_compute::cuda;
use thelma_compute::{
    choose, parse_backend as parse_name, BackendError, Choice, DeviceError, Devices, BACKENDS,
};
use thelma_core::{BackendName, DeviceSpec, DeviceSpecError};

fn cpu() -> Choice {
    choose(&BackendName::new("cpu")).unwrap()
}

#[test]
fn names_resolve_through_the_registry() {
    assert_eq!(parse_name("CPU").unwrap().as_str(), "cpu");
    assert!(parse_name("auto").unwrap().is_auto());
    let e = parse_name("opencl").unwrap_err().to_string();
    assert!(e.contains("opencl") && e.contains("auto, cuda, cpu"), "{e}");
    let e = choose(&BackendName::new("metal")).unwrap_err();
    assert!(matches!(e, BackendError::Unknown { .. }), "{e}");
    assert_eq!(cpu().backend.name, "cpu");
    assert!(cpu().backend.host);
}

#[test]
fn auto_ends_on_the_cpu_module_without_a_gpu() {
    // Every later backend is tried only when the earlier ones find nothing; the CPU module is
    // last and always there.
    assert_eq!(BACKENDS.last().unwrap().name, "cpu");
    let c = choose(&BackendName::default()).unwrap();
    if cuda::device_count().is_err() {
        assert_eq!(c.backend.name, "cpu");
        assert!(
            c.note.contains("cuda: ") && c.note.ends_with("using the cpu module"),
            "{}",
            c.note
        );
    }
}

#[test]
fn virtual_devices_are_counts_or_permutations() {
    let c = cpu();
    assert_eq!(c.resolve(&DeviceSpec::All).unwrap(), vec![0]);
    assert_eq!(c.resolve(&DeviceSpec::Count(3)).unwrap(), vec![0, 1, 2]);
    assert_eq!(
        c.resolve(&DeviceSpec::List(vec![1, 0])).unwrap(),
        vec![1, 0]
    );
    assert!(matches!(
        c.resolve(&DeviceSpec::List(vec![5])),
        Err(DeviceError::NotInOrder { id: 5, count: 1 })
    ));
    assert!(matches!(
        c.resolve(&DeviceSpec::Count(usize::MAX)),
        Err(DeviceError::TooManyVirtual { .. })
    ));
}

#[test]
fn physical_devices_are_checked_against_those_present() {
    let c = Choice {
        backend: &BACKENDS[0],
        devices: Devices::Physical { count: 2 },
        note: String::new(),
    };
    assert_eq!(c.resolve(&DeviceSpec::All).unwrap(), vec![0, 1]);
    assert_eq!(c.resolve(&DeviceSpec::List(vec![1])).unwrap(), vec![1]);
    assert_eq!(
        c.resolve(&DeviceSpec::Count(3)).unwrap_err(),
        DeviceError::Spec(DeviceSpecError::TooMany {
            asked: 3,
            available: 2
        })
    );
    let e = c
        .resolve(&DeviceSpec::List(vec![0, 2]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("device 2 does not exist (2 available: 0..1)"),
        "{e}"
    );
}
