//! Running the `rankwise` binary from integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Asserts the exit code and that nothing panicked.
    pub fn expect(self, code: i32) -> Out {
        assert!(
            !self.stderr.contains("panicked"),
            "a panic reached the user:\n{}",
            self.stderr
        );
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

pub fn rankwise(args: &[&str]) -> Out {
    rankwise_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

pub fn rankwise_in(dir: &Path, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .args(args)
        .current_dir(dir)
        .env_remove("RANKWISE_DEBUG")
        .output()
        .expect("run the rankwise binary");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `rankwise verify --ranks n --out <tmp>/run`; returns the temp dir and the run path.
pub fn verified_run(n: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    rankwise(&[
        "verify",
        "--ranks",
        &n.to_string(),
        "--out",
        run.to_str().unwrap(),
    ])
    .expect(0);
    (tmp, run)
}
