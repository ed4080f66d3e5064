//! Simulated hosts in network namespaces, for the interposer's tests: one
//! "switch" namespace holding a Linux bridge, and one namespace per host
//! joined to the bridge by a veth pair, with an address of 10.231.0.0/24
//! that exists only inside these namespaces. This module owns the
//! namespaces a test makes: [`Net`] removes every one of them when it is
//! dropped, a failed test's too. Rank processes run inside their host's
//! namespace (`ip netns exec`), each host's ranks with a segment directory
//! of their own, and the store listens on host 0's address: the ranks of
//! other hosts reach it only across their veth and the bridge, which a
//! test can cut.
#![allow(dead_code)]

use crate::ranks::{Place, Run, spawn};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// One test's namespaces: names unique per test process and call, so
/// tests running side by side (and test runs side by side) never meet.
pub struct Net {
    switch: String,
    hosts: Vec<String>,
    /// every namespace made so far, removed on drop
    made: Vec<String>,
}

/// iproute2's `ip`: where Debian puts it, which a user's PATH may lack,
/// else as PATH finds it.
fn ip_binary() -> &'static str {
    ["/usr/sbin/ip", "/sbin/ip"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("ip")
}

/// `ip` with `args`; what it said on stderr when it failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new(ip_binary())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` ({e})"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

impl Net {
    /// `hosts` host namespaces on one bridge, or why they cannot be made
    /// (not root, no `ip`, namespaces refused).
    pub fn make(hosts: usize) -> Result<Net, String> {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        let base = format!(
            "rkw{}-{}",
            std::process::id(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        );
        let mut net = Net {
            switch: format!("{base}-sw"),
            hosts: (0..hosts).map(|h| format!("{base}-h{h}")).collect(),
            made: Vec::new(),
        };
        let sw = net.switch.clone();
        net.add(&sw)?;
        // interface names are per namespace, so short fixed ones do
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for h in 0..hosts {
            let ns = net.hosts[h].clone();
            net.add(&ns)?;
            let port = format!("p{h}");
            // both ends made where they belong: nothing appears in the
            // namespace the test runs in
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            let cidr = format!("{}/24", net.addr(h));
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        // `ip netns exec` needs more than making namespaces does (a mount
        // namespace of its own): find out now, not in a rank
        ip(&[
            "netns",
            "exec",
            &net.hosts[0],
            "ip",
            "-4",
            "addr",
            "show",
            "eth0",
        ])?;
        Ok(net)
    }

    fn add(&mut self, ns: &str) -> Result<(), String> {
        ip(&["netns", "add", ns])?;
        self.made.push(ns.to_string());
        Ok(())
    }

    /// Host `h`'s address.
    pub fn addr(&self, h: usize) -> String {
        format!("10.231.0.{}", h + 1)
    }

    /// Host `h`'s namespace.
    pub fn host(&self, h: usize) -> &str {
        &self.hosts[h]
    }

    /// Cuts host `h` off the others: its port on the bridge goes down, and
    /// whatever it or they send each other from then on is lost without a
    /// word, as when a cable is pulled.
    pub fn cut(&self, h: usize) -> Result<(), String> {
        ip(&["-n", &self.switch, "link", "set", &format!("p{h}"), "down"])
    }

    /// Runs `scenario` on `per_host` ranks in each host's namespace (ranks
    /// in host order), every rank told to name host 0's address in its
    /// unique id, as NCCL names the interface it picked; `during` runs
    /// while the ranks do. Ranks still running after `limit` are killed.
    pub fn run(
        &self,
        scenario: &str,
        per_host: usize,
        env: &[(&str, &str)],
        during: Option<&mut dyn FnMut(&Path)>,
        limit: Duration,
    ) -> Run {
        let addr = self.addr(0);
        let mut env = env.to_vec();
        env.push(("RANKWISE_STANDIN_ADDR", &addr));
        let wrap = |r: usize| -> Vec<String> {
            [ip_binary(), "netns", "exec", self.host(r / per_host)]
                .map(String::from)
                .to_vec()
        };
        let place = Place {
            per_host: Some(per_host),
            wrap: Some(&wrap),
            during: during.map(|d| Box::new(d) as _),
            limit: Some(limit),
        };
        spawn(scenario, per_host * self.hosts.len(), true, &env, place)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // the veths and the bridge go with their namespaces
        for ns in self.made.iter().rev() {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("{e}");
            }
        }
    }
}

/// The namespaces for `hosts` hosts, or None after a line on the test
/// run's own stderr (which the test harness does not capture) saying that
/// `test` is skipped and why.
pub fn or_skip(test: &str, hosts: usize) -> Option<Net> {
    match Net::make(hosts) {
        Ok(net) => Some(net),
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: network namespaces unavailable: {why}"
            );
            None
        }
    }
}
