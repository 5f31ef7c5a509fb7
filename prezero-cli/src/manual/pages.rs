//! Each command's page beyond its clap definition: examples (each a
//! `prezero` command line a test parses), the files it uses, its exit
//! statuses beyond every command's, and pages to see.

use super::{Env, Page};

const SOCKET: (&str, &str) = (
    "/run/prezero/prezero.sock",
    "The socket of prezero serve (--socket, PREZERO_SOCKET or the configuration's socket \
     name another).",
);
const HUGETLB: (&str, &str) = (
    "/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages",
    "The hugetlb pools, grown under --reserve and put back afterwards, also on Ctrl-C (exit \
     status 130 then).",
);
const PROGRAM_EXIT: &[(&str, &str)] = &[
    (
        "0-255",
        "Once the program runs, its own status: prezero execs it in its place (128+N: it was \
         killed by signal N).",
    ),
    ("126", "The program was found but could not be run."),
    ("127", "The program was not found."),
];

const PAGES: &[Page] = &[
    Page {
        name: "prezero",
        examples: &[
            (
                "What this machine offers, and what Auto picks.",
                "prezero info",
            ),
            (
                "Measure this machine against the kernel and glibc, into one report.",
                "prezero bench all --quick --reserve --report report.html",
            ),
            (
                "Run a program with pre-zeroed large blocks.",
                "prezero run -- python3 job.py",
            ),
        ],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-info",
        examples: &[
            ("The machine, as text.", "prezero info"),
            (
                "As a CPU without AVX-512 would see it, as JSON.",
                "PREZERO_CPU=-avx512f prezero info --json",
            ),
        ],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-calibrate",
        examples: &[
            (
                "Measure this machine and write the profile Auto follows.",
                "prezero calibrate",
            ),
            (
                "Measure again and list the figures that moved by more than 10%.",
                "prezero calibrate --check",
            ),
            (
                "Write the profile elsewhere.",
                "prezero calibrate --out /tmp/profile.json",
            ),
        ],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-report",
        examples: &[(
            "The HTML report again from the rows bench all kept.",
            "prezero report rows.jsonl --out report.html",
        )],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &["prezero-bench-all(1)"],
    },
    Page {
        name: "prezero-bench",
        examples: &[
            ("Clearing speed by size and kernel.", "prezero bench clear"),
            (
                "Every benchmark at tiny sizes, in seconds.",
                "prezero bench all --smoke",
            ),
        ],
        env: &[],
        files: &[HUGETLB],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-clear",
        examples: &[
            (
                "Every kernel this CPU has, hot and cold.",
                "prezero bench clear",
            ),
            (
                "Two sizes, cold only, as JSON.",
                "prezero bench clear --mode cold --sizes 64K,64M --json",
            ),
        ],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-mmap",
        examples: &[(
            "perf's bench mem mmap for 2 MiB pages, 4 GiB a loop, the pool grown for it.",
            "prezero bench mmap -p 2MB -s 4G -l 5 --reserve",
        )],
        env: &[],
        files: &[HUGETLB],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-faults",
        examples: &[(
            "The fault-rate table for base pages and THP.",
            "prezero bench faults -p 4KB,thp",
        )],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-pool",
        examples: &[(
            "The pool's hand-out latency and throughput.",
            "prezero bench pool",
        )],
        env: &[],
        files: &[HUGETLB],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-template",
        examples: &[
            (
                "Template fill against per-field initialisation.",
                "prezero bench template",
            ),
            (
                "Where streaming stores start to pay.",
                "prezero bench template --stores",
            ),
        ],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-service",
        examples: &[(
            "prezero serve against the kernel, the pages reserved for the run.",
            "prezero bench service --reserve",
        )],
        env: &[],
        files: &[HUGETLB],
        exit: &[],
        see_also: &["prezero-serve(1)"],
    },
    Page {
        name: "prezero-bench-run",
        examples: &[
            (
                "Unmodified programs with and without prezero run.",
                "prezero bench run",
            ),
            (
                "Only the C calloc programs, with the lazy mode.",
                "prezero bench run --only calloc-big,calloc-mix --lazy",
            ),
        ],
        env: &[Env::Preload],
        files: &[],
        exit: &[],
        see_also: &["prezero-run(1)"],
    },
    Page {
        name: "prezero-bench-programs",
        examples: &[
            (
                "Real programs from Debian's packages plainly, under prezero run and --lazy.",
                "prezero bench programs",
            ),
            (
                "Two of them, three times each, as JSON rows.",
                "prezero bench programs --only java-pretouch,sort --reps 3 --json",
            ),
        ],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &["prezero-run(1)", "prezero-bench-run(1)"],
    },
    Page {
        name: "prezero-bench-compare",
        examples: &[(
            "What changed between two runs' --json outputs.",
            "prezero bench compare before.json after.json",
        )],
        env: &[],
        files: &[],
        exit: &[],
        see_also: &[],
    },
    Page {
        name: "prezero-bench-all",
        examples: &[
            (
                "The main job: every benchmark, quickly, into one report.",
                "prezero bench all --quick --reserve --report report.html",
            ),
            (
                "A check that every step works here, in seconds, keeping the rows.",
                "prezero bench all --smoke --json-out rows.jsonl",
            ),
        ],
        env: &[],
        files: &[HUGETLB],
        exit: &[(
            "1",
            "An error, or a step that failed: the other steps still ran, the report and the \
             rows keep what was measured, and the last line names the failed steps.",
        )],
        see_also: &["prezero-report(1)"],
    },
    Page {
        name: "prezero-run",
        examples: &[
            (
                "A Python job with pre-zeroed large blocks.",
                "prezero run -- python3 job.py",
            ),
            (
                "Memory populated on first touch from pre-zeroed huge pages, with a summary.",
                "prezero run --lazy --stats -- ./simulation",
            ),
            (
                "Only blocks of 4 MiB and more, at most 2 GiB kept.",
                "prezero run --threshold 4M --cap 2G -- ./server",
            ),
        ],
        env: &[Env::Preload],
        files: &[
            (
                "$XDG_CACHE_HOME/prezero",
                "Where the preload library embedded in prezero is written, once per version \
                 (~/.cache/prezero without XDG_CACHE_HOME, else /tmp/prezero-UID).",
            ),
            (
                "$XDG_CACHE_HOME/prezero/history",
                "With --lazy --history, one file per command (program and arguments): the \
                 bytes the lazy mode served its last run, which the next run fills ahead.",
            ),
        ],
        exit: PROGRAM_EXIT,
        see_also: &["ld.so(8)"],
    },
    Page {
        name: "prezero-serve",
        examples: &[
            (
                "As the package's unit runs it.",
                "prezero serve --config /etc/prezero/prezero.toml",
            ),
            (
                "Check a configuration, and see its pools as this machine would place them.",
                "prezero serve --config /etc/prezero/prezero.toml --check",
            ),
            (
                "By hand: an eighth of each node's memory ready, the pages reserved for it.",
                "prezero serve --pool 2MB:target=1/8,cap=1/4 --reserve",
            ),
            (
                "Pools by VM shape, the counters for node_exporter.",
                "prezero serve --pool 2MB:segment=4G,target=16G --pool 2MB:segment=256M,target=4G \
                 --metrics-textfile /var/lib/prometheus/node-exporter/prezero.prom",
            ),
        ],
        env: &[],
        files: &[
            (
                "/etc/prezero/prezero.toml",
                "The configuration (--config): pools, who may connect, caps. Flags override it.",
            ),
            SOCKET,
            (
                "/run/prezero/prezero.sock.ledger",
                "The segments handed out, for the next instance to find those still held \
                 (--ledger).",
            ),
            (
                "/sys/devices/system/node/node*/hugepages/hugepages-*/nr_hugepages",
                "Each node's hugetlb pages, which the pools take (written only under \
                 --reserve); short of them the daemon says once which to write.",
            ),
            (
                "/usr/lib/systemd/system/prezero.service",
                "The unit that runs it (systemctl enable --now prezero).",
            ),
        ],
        exit: &[(
            "0",
            "Stopped by SIGTERM, SIGINT or SIGHUP (memory handed out stays valid for its \
             holders).",
        )],
        see_also: &["prezero-client(1)", "systemd.exec(5)"],
    },
    Page {
        name: "prezero-client",
        examples: &[
            ("The service's counters.", "prezero client stats"),
            (
                "8 GiB of zeroed memory, every byte checked.",
                "prezero client alloc 8G",
            ),
        ],
        env: &[Env::Socket],
        files: &[SOCKET],
        exit: &[],
        see_also: &["prezero-serve(1)"],
    },
    Page {
        name: "prezero-client-alloc",
        examples: &[
            (
                "Ask for 8 GiB of 2 MiB pages, check it, give it back.",
                "prezero client alloc 8G",
            ),
            (
                "The service's memory or nothing: exit status 1 rather than local memory.",
                "prezero client alloc 8G --no-fallback",
            ),
            (
                "Hold 1 GiB of 1 GiB pages until stdin ends.",
                "prezero client alloc 1G --page 1GB --hold",
            ),
        ],
        env: &[Env::Socket],
        files: &[SOCKET],
        exit: &[(
            "1",
            "An error; with --no-fallback also a service that did not serve (without it, \
             local memory serves, said on stderr, and the status is 0).",
        )],
        see_also: &["prezero-serve(1)"],
    },
    Page {
        name: "prezero-client-stats",
        examples: &[
            (
                "Pools, hand-outs, refusals and tenants.",
                "prezero client stats",
            ),
            (
                "The Prometheus text the metrics file holds.",
                "prezero client stats --prometheus",
            ),
            (
                "Another daemon's, as JSON.",
                "prezero client stats --socket /run/prezero-test/s.sock --json",
            ),
        ],
        env: &[Env::Socket],
        files: &[SOCKET],
        exit: &[(
            "1",
            "An error, among them no service at the socket (said with how to start one).",
        )],
        see_also: &["prezero-serve(1)"],
    },
    Page {
        name: "prezero-client-churn",
        examples: &[(
            "Ten seconds of random requests up to 256 MiB, every byte checked.",
            "prezero client churn --seconds 10 --max 256M",
        )],
        env: &[Env::Socket],
        files: &[SOCKET],
        exit: &[("1", "An error, or a byte handed out that was not zero.")],
        see_also: &["prezero-serve(1)"],
    },
    Page {
        name: "prezero-client-exec",
        examples: &[
            (
                "A QEMU guest's 4 GiB of RAM from the service, as a file it maps.",
                "prezero client exec --size 4G --no-fallback -- qemu-system-x86_64 -m 4G \
                 -object memory-backend-file,id=mem,size=4G,mem-path={path},share=on \
                 -machine memory-backend=mem",
            ),
            (
                "Any program, given the file's descriptor and size.",
                "prezero client exec --size 1G -- ./vmm --memfd {fd} --bytes {size}",
            ),
        ],
        env: &[Env::Socket],
        files: &[SOCKET],
        exit: &[
            PROGRAM_EXIT[0],
            PROGRAM_EXIT[1],
            PROGRAM_EXIT[2],
            (
                "1",
                "An error before the program runs; with --no-fallback also a service that \
                 did not serve.",
            ),
        ],
        see_also: &["prezero-serve(1)", "qemu-system-x86_64(1)"],
    },
    Page {
        name: "prezero-client-prepare",
        examples: &[
            (
                "A VM launcher makes 4 GiB ready inside the VM's cgroup before starting it.",
                "prezero client prepare /machine.slice/vm1.scope 4G",
            ),
            (
                "The VM is gone: nothing kept for its cgroup any more.",
                "prezero client prepare /machine.slice/vm1.scope 0",
            ),
        ],
        env: &[Env::Socket],
        files: &[SOCKET],
        exit: &[(
            "1",
            "An error: no service, a cgroup this uid does not own (EACCES), one that does not \
             exist, or more than its limits leave room for (ENOMEM).",
        )],
        see_also: &["prezero-serve(1)", "prezero-client-exec(1)"],
    },
];

/// The page named `name`.
pub(super) fn page(name: &str) -> Option<&'static Page> {
    PAGES.iter().find(|p| p.name == name)
}

/// Every page, for the tests.
#[cfg(test)]
pub(super) fn all() -> &'static [Page] {
    PAGES
}
