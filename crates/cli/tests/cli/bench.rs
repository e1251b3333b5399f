//! `rstar bench policy`: bad flags are refused by name; without a Python that can run the
//! peer, our side is still measured and the peer's column says so.

use super::common::rstar;

fn peer_script() -> String {
    rstar_testdata::workspace_root()
        .join("xtask/bench/policy_peer.py")
        .display()
        .to_string()
}

#[test]
fn bad_flags_are_refused_by_name() {
    let peer = peer_script();
    for (flags, want) in [
        (&["--reps", "0"][..], "--reps 0"),
        (&["--rounds", "0"][..], "--rounds 0"),
        (&["--shape", "big"][..], "--shape `big`"),
        (&["--train", "8"][..], "--train `8`"),
        (&["--decode", "8x8"][..], "--decode `8x8`"),
        (&["--precision", "f8"][..], "--precision"),
        (&["--peer", "/nonexistent/peer.py"][..], "no such file"),
    ] {
        let mut args = vec!["bench", "policy"];
        if flags[0] != "--peer" {
            args.extend(["--peer", peer.as_str()]);
        }
        args.extend_from_slice(flags);
        let (code, _, err) = rstar(&args);
        assert_eq!(code, 1, "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
    }
}

#[test]
fn without_a_peer_ours_is_measured_alone() {
    let peer = peer_script();
    let (code, out, err) = rstar(&[
        "bench",
        "policy",
        "--python",
        "/nonexistent/python",
        "--peer",
        &peer,
        "--reps",
        "1",
        "--train",
        "2x8",
        "--decode",
        "2x5x3",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("peer unavailable"), "{out}");
    for workload in ["prefill tok/s", "decode tok/s", "train tok/s"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(workload))
            .unwrap_or_else(|| panic!("no {workload} line in {out}"));
        // Ours measured, the peer's column and the ratio `-`.
        assert!(line.contains("(1t)") || line.contains("(2t)"), "{line}");
        assert!(line.trim_end().ends_with('-'), "{line}");
    }
    assert!(
        out.contains("cpu: ") && out.contains("fused kernels: "),
        "{out}"
    );
}
