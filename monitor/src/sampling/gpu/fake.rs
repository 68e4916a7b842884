//! A fake GPU for tests: what each query answers is plain data the test sets, shared with the
//! monitor through an `Arc` (a backend is `Send`), so the test can change it between sweeps.
use super::*;
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Default)]
pub struct FakeDevice {
    pub info: GpuDevice,
    pub reading: DeviceReading,
    /// None: cannot list processes.
    pub processes: Option<Vec<GpuProcess>>,
    /// None: no per-process utilization; the backend filters by `since_us` like the driver.
    pub utilization: Option<Vec<ProcessUtilization>>,
    pub accounting: bool,
    pub accounting_stats: HashMap<u32, AccountingReading>,
}

/// Cloning shares the devices.
#[derive(Clone, Debug, Default)]
pub struct FakeBackend {
    pub devices: Arc<Mutex<Vec<FakeDevice>>>,
    /// Err: what `devices()` answers.
    pub failure: Option<GpuError>,
    /// The `since_us` of each process_utilization call, for the tests to check.
    pub utilization_queries: Arc<Mutex<Vec<Option<u64>>>>,
}

impl FakeBackend {
    pub fn new(devices: Vec<FakeDevice>) -> FakeBackend {
        FakeBackend {
            devices: Arc::new(Mutex::new(devices)),
            ..Default::default()
        }
    }

    pub fn boxed(&self) -> Box<dyn GpuBackend> {
        Box::new(self.clone())
    }

    fn with<T>(&self, index: u32, f: impl FnOnce(&FakeDevice) -> T) -> Option<T> {
        self.devices
            .lock()
            .unwrap()
            .iter()
            .find(|d| d.info.index == index)
            .map(f)
    }
}

impl GpuBackend for FakeBackend {
    fn devices(&self) -> Result<Vec<GpuDevice>, GpuError> {
        match &self.failure {
            Some(err) => Err(err.clone()),
            None => Ok(self
                .devices
                .lock()
                .unwrap()
                .iter()
                .map(|d| d.info.clone())
                .collect()),
        }
    }

    fn reading(&self, index: u32) -> DeviceReading {
        self.with(index, |d| d.reading.clone()).unwrap_or_default()
    }

    fn processes(&self, index: u32) -> Option<Vec<GpuProcess>> {
        self.with(index, |d| d.processes.clone()).flatten()
    }

    fn process_utilization(
        &self,
        index: u32,
        since_us: Option<u64>,
    ) -> Option<Vec<ProcessUtilization>> {
        self.utilization_queries.lock().unwrap().push(since_us);
        let samples = self.with(index, |d| d.utilization.clone()).flatten()?;
        let since = since_us.unwrap_or(0);
        Some(
            samples
                .into_iter()
                .filter(|s| s.timestamp_us > since)
                .collect(),
        )
    }

    fn accounting_enabled(&self, index: u32) -> bool {
        self.with(index, |d| d.accounting).unwrap_or(false)
    }

    fn accounting_pids(&self, index: u32) -> Option<Vec<u32>> {
        self.with(index, |d| {
            d.accounting
                .then(|| d.accounting_stats.keys().copied().collect())
        })
        .flatten()
    }

    fn accounting_stats(&self, index: u32, pid: u32) -> Option<AccountingReading> {
        self.with(index, |d| {
            d.accounting
                .then(|| d.accounting_stats.get(&pid).copied())
                .flatten()
        })
        .flatten()
    }
}
