//! Pool life cycle: dead workers are replaced and their call still gets a
//! result; batches keep order; status counts; bad configuration is refused.

use std::time::Duration;

use rstar_toolenv::{BlockingPool, Error, Outcome, Pool, ToolCall};

use super::common::{assert_clean, builder};

#[test]
fn a_worker_killed_by_its_call_is_replaced() {
    // Without Landlock's signal scoping and the uid switch (both of which stop
    // it on their own), the child can kill its parent worker: the call must
    // still get exactly one (internal, retryable) result.
    let pool =
        BlockingPool::new(builder().workers(1).landlock(false).unprivileged_uid(None)).unwrap();
    let r = pool.run(ToolCall::python(
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(5)",
        "",
    ));
    assert_eq!(r.outcome, Outcome::Internal, "{r:?}");
    assert!(r.is_retryable());
    assert_clean(&pool);
    assert_eq!(pool.pool().status().restarts, 1);
}

#[test]
fn batches_keep_input_order_and_status_settles() {
    let pool = BlockingPool::new(builder().workers(2).max_calls_per_worker(3)).unwrap();
    let calls: Vec<_> = (0..12)
        .map(|i| {
            ToolCall::python(
                format!("import time\ntime.sleep(0.{})\nprint({i})", 12 - i),
                "",
            )
        })
        .collect();
    let results = pool.run_batch(calls);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.stdout, format!("{i}\n"), "{r:?}");
    }
    let status = pool.pool().status();
    assert_eq!((status.queued, status.running, status.workers), (0, 0, 2));
    assert!(status.restarts >= 2, "{status:?}");
    assert_clean(&pool);
}

#[test]
fn per_call_timeout_overrides_the_pool() {
    let pool = BlockingPool::new(builder().workers(1).timeout(Duration::from_secs(5))).unwrap();
    let r = pool.run(
        ToolCall::python("import time\ntime.sleep(3)", "").with_timeout(Duration::from_millis(300)),
    );
    assert_eq!(r.outcome, Outcome::Timeout);
    assert!(r.cost < 2.0, "{r:?}");
}

#[test]
fn dropping_the_pool_removes_its_directory() {
    let pool = BlockingPool::new(builder().workers(1)).unwrap();
    let dir = pool.pool().run_dir();
    assert!(dir.is_dir());
    assert_eq!(pool.run(ToolCall::python("print(2)", "")).stdout, "2\n");
    drop(pool);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while dir.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn bad_configuration_is_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(matches!(
            Pool::builder().workers(0).build(),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            Pool::builder().timeout(Duration::ZERO).build(),
            Err(Error::Config(_))
        ));
    });
    let missing = BlockingPool::new(builder().workers(1).python("/nonexistent/python3"));
    assert!(missing.is_err());
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: signalling a worker process of our own pool.
    #[allow(unsafe_code)] // reason: kill(2) to simulate a dead or hung worker
    unsafe {
        libc::kill(pid, sig);
    }
}

#[test]
fn a_worker_that_dies_while_idle_is_replaced_before_the_next_call() {
    let pool = BlockingPool::new(builder().workers(1).preload(Vec::<String>::new())).unwrap();
    let pids = pool.pool().worker_pids();
    assert_eq!(pids.len(), 1);
    signal(pids[0], libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    let r = pool.run(ToolCall::python("print(3)", ""));
    assert_eq!(
        (r.outcome, r.stdout.as_str()),
        (Outcome::Output, "3\n"),
        "{r:?}"
    );
    assert_ne!(pool.pool().worker_pids(), pids);
    assert_eq!(pool.pool().status().restarts, 1);
}

#[test]
fn a_hung_worker_is_replaced_and_its_call_answered() {
    let pool = BlockingPool::new(builder().workers(1).preload(Vec::<String>::new())).unwrap();
    let pids = pool.pool().worker_pids();
    signal(pids[0], libc::SIGSTOP);
    let call = ToolCall::python("print(4)", "").with_timeout(Duration::from_millis(200));
    let r = pool.run(call);
    assert_eq!(r.outcome, Outcome::Internal, "{r:?}");
    assert!(
        r.message.as_deref().unwrap_or("").contains("no answer"),
        "{r:?}"
    );
    assert_clean(&pool);
    assert_ne!(pool.pool().worker_pids(), pids);
}

/// Issue #68: calls that run to their time limit do not hold the queue. Four calls that spin
/// until their wall clock runs out go first, on a pool of two workers, then 100 quick calls:
/// every quick call returns, right, before the first spinner does (an ordering check, not a
/// timing one: the spinners' limit is far above what the quick calls need).
#[test]
fn quick_calls_do_not_wait_behind_calls_at_their_time_limit() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let pool =
        Arc::new(BlockingPool::new(builder().workers(2).timeout(Duration::from_secs(15))).unwrap());
    let order = Arc::new(AtomicUsize::new(0));
    // (the order it returned in, whether it spins, its outcome, its stdout, how long it waited
    // behind calls at their limit)
    type Done = Vec<(usize, bool, Outcome, String, Duration)>;
    let done: Arc<Mutex<Done>> = Arc::default();
    let mut threads = Vec::new();
    let mut submit = |code: String, spinner: bool| {
        let (pool, order, done) = (Arc::clone(&pool), Arc::clone(&order), Arc::clone(&done));
        threads.push(std::thread::spawn(move || {
            let (r, behind) = pool.run_waited(ToolCall::python(&code, ""));
            let at = order.fetch_add(1, Ordering::SeqCst);
            done.lock()
                .unwrap()
                .push((at, spinner, r.outcome, r.stdout, behind));
        }));
    };
    for _ in 0..4 {
        submit("while True:\n    pass".into(), true);
    }
    // The spinners are queued (and taken) first.
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..100 {
        submit(format!("print({i} * 2)"), false);
    }
    for t in threads {
        t.join().unwrap();
    }
    let done = done.lock().unwrap();
    let first_spinner = done.iter().filter(|d| d.1).map(|d| d.0).min().unwrap();
    let mut quick = 0;
    for (at, spinner, outcome, stdout, _) in done.iter() {
        if *spinner {
            assert_eq!(*outcome, Outcome::Timeout);
        } else {
            quick += 1;
            assert_eq!(*outcome, Outcome::Output, "{stdout}");
            assert!(
                *at < first_spinner,
                "a quick call returned {at}th, after the first spinner ({first_spinner}th)"
            );
        }
    }
    assert_eq!(quick, 100);
    // The quick calls queued while the first spinners were past their soft limit: some of their
    // wait is counted as waiting behind calls at their limit (while overflow workers started).
    let behind: Duration = done.iter().filter(|d| !d.1).map(|d| d.4).sum();
    assert!(
        behind > Duration::ZERO,
        "no wait behind the spinners was counted"
    );
    let mut outputs: Vec<i64> = done
        .iter()
        .filter(|d| !d.1)
        .map(|d| d.3.trim().parse().unwrap())
        .collect();
    outputs.sort_unstable();
    assert_eq!(outputs, (0..100).map(|i| i * 2).collect::<Vec<_>>());
    assert_clean(&pool);
}
