//! A scripted turn generator and scripted tools shared by the scheduled-rollout tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rstar_engine::{BoxError, BoxFuture, TurnGenerator, TurnSample, TurnSpec};
use rstar_episode::episode::{ByteTokenizer, TextTokenizer};
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_rollout::scheduled::{AsyncTools, FnTools};

/// What a scripted generator writes for turn `turn` of rollout `rollout` (`None`: an empty turn).
pub type Script = Arc<dyn Fn(u64, u32) -> Option<String> + Send + Sync>;

/// Writes fixed text per (rollout, turn), byte-tokenized, with fake per-token statistics
/// (entropy 0.5, log-prob −0.25), after a short delay that differs between rollouts so turns
/// finish out of order.
pub struct ScriptGen {
    pub script: Script,
    pub calls: Arc<AtomicUsize>,
    /// Every spec seen, for checks on seeds and budgets.
    pub seen: Arc<Mutex<Vec<TurnSpec>>>,
    pub kv: u64,
    /// The log-prob of the token at each absolute context position (`None`: −0.25 each).
    pub logprob: Option<Arc<dyn Fn(usize) -> f32 + Send + Sync>>,
    /// The weight version of each turn (`None`: `v1` each).
    pub version: Option<Arc<dyn Fn(u32) -> String + Send + Sync>>,
}

impl ScriptGen {
    pub fn new(script: Script) -> Self {
        ScriptGen {
            script,
            calls: Arc::new(AtomicUsize::new(0)),
            seen: Arc::new(Mutex::new(Vec::new())),
            kv: 1 << 20,
            logprob: None,
            version: None,
        }
    }
}

impl TurnGenerator for ScriptGen {
    fn name(&self) -> String {
        "script".into()
    }
    fn kv_capacity(&self) -> u64 {
        self.kv
    }
    fn generate(&self, spec: TurnSpec) -> BoxFuture<'_, Result<TurnSample, BoxError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen.lock().unwrap().push(spec.clone());
            let delay = (spec.rollout * 7 + u64::from(spec.turn) * 3) % 5;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let text = (self.script)(spec.rollout, spec.turn).unwrap_or_default();
            let tokens = ByteTokenizer.encode(&text);
            let n = tokens.len();
            let logprobs = match &self.logprob {
                Some(f) => (0..n).map(|k| f(spec.context.len() + k)).collect(),
                None => vec![-0.25; n],
            };
            let version = self.version.as_ref().map_or("v1".into(), |f| f(spec.turn));
            Ok(TurnSample {
                tokens,
                logprobs,
                entropies: vec![0.5; n],
                weight_version: Some(version),
            })
        })
    }
}

/// `n` scripted generators sharing one script and one call counter.
pub fn generators(script: &Script, n: usize) -> (Vec<Arc<dyn TurnGenerator>>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let gens = (0..n)
        .map(|_| {
            let mut g = ScriptGen::new(Arc::clone(script));
            g.calls = Arc::clone(&calls);
            Arc::new(g) as Arc<dyn TurnGenerator>
        })
        .collect();
    (gens, calls)
}

/// Scripted tools: `print(X)` prints X; code containing `while True` times out; code
/// containing `raise` fails with a ZeroDivisionError; `pass` prints nothing. Counts calls.
pub fn tools(counter: Arc<AtomicUsize>) -> Arc<dyn AsyncTools> {
    Arc::new(FnTools(move |call: ToolCall| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { outcome(&call.code) }
    }))
}

/// The scripted outcome of a piece of code (see [`tools`]).
pub fn outcome(code: &str) -> ToolOutcome {
    if code.contains("while True") {
        ToolOutcome::code_judge(false, "worker_timeout", "", "", 1.0)
    } else if code.contains("raise") {
        ToolOutcome::code_judge(
            false,
            "",
            "",
            "Traceback (most recent call last):\nZeroDivisionError: division by zero\n",
            0.01,
        )
    } else if let Some(arg) = code
        .strip_prefix("print(")
        .and_then(|c| c.strip_suffix(')'))
    {
        ToolOutcome::code_judge(true, "", &format!("{arg}\n"), "", 0.01)
    } else {
        ToolOutcome::code_judge(true, "", "", "", 0.01)
    }
}
