/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * The record the BPF programs write into the ring buffer, shared with Rust.
 *
 * Rust mirrors `struct pio_record` in `src/record.rs`; the build script reads
 * the PIO_* numbers below from this file and the Rust side checks its layout
 * against them at compile time, so a change here that is not made there
 * fails the build instead of corrupting events.
 *
 * Only fixed-width types, no padding: the same bytes on both sides.
 */
#ifndef PREDICTIO_OBSERVE_H
#define PREDICTIO_OBSERVE_H

/* Record kinds (`pio_record.kind`). */
#define PIO_KIND_READ 1      /* filemap:mm_filemap_get_pages: first..last */
#define PIO_KIND_FAULT 2     /* filemap:mm_filemap_fault: first */
#define PIO_KIND_MAP_PAGES 3 /* filemap:mm_filemap_map_pages: first..last */
#define PIO_KIND_MISS 4      /* filemap:mm_filemap_add_to_page_cache: first, 2^order pages */
#define PIO_KIND_EVICT 5     /* filemap:mm_filemap_delete_from_page_cache: first, 2^order pages */
#define PIO_KIND_EXEC 6      /* sched:sched_process_exec: ino/dev of mm->exe_file, the command line (struct pio_exec) */
#define PIO_KIND_FORK 7      /* sched:sched_process_fork (raw): pid = parent, aux = child */
#define PIO_KIND_EXIT 8      /* sched:sched_process_exit with group_dead */
#define PIO_KIND_LOOKUP 9    /* syscalls:sys_enter_* of a path call: an absolute path (struct pio_lookup) */
#define PIO_KIND_EXEC_START 10 /* syscalls:sys_enter_execve(at): path and command line asked for (struct pio_exec_start) */

/* log2 of the page size page indices count in (predictio requires 4 KiB). */
#define PIO_PAGE_SHIFT 12

/* Size of `struct pio_record` in bytes. */
#define PIO_RECORD_SIZE 48

/* Bytes of a looked-up path a lookup record holds, its NUL included: longer
 * paths are not reported (`aux` 0). */
#define PIO_PATH_BYTES 256

/* Bytes of an exec'd command line an exec record holds (its first bytes: the
 * arguments, each followed by a NUL); the same as predictio's
 * `launch::shape::ARGV_BYTES`, which a command shape is made of. */
#define PIO_ARGS_BYTES 256

/* Indices of the per-CPU `lost` counters. */
#define PIO_LOST_RECORDS 0 /* ring buffer full */
#define PIO_LOST_FOLLOWS 1 /* followed set full: a forked child not followed */
#define PIO_LOST_COUNTERS 2

/* Capacity of the device filter. */
#define PIO_MAX_DEVICES 64

/* Index of the switches' entry of the `settings` array map. */
#define PIO_SETTINGS_KEY 0
/* Index of the `settings` entry that user space sets to 1 before it sleeps
 * on an emptied ring: the next record wakes it, and sets the entry back to 0
 * (one wake-up per quiet-to-busy change, none while records flow). */
#define PIO_SLEEPING_KEY 1
/* `settings` bit: report every process (the daemon's mode). */
#define PIO_SETTING_FOLLOW_ALL 1
/* `settings` bit: with FOLLOW_ALL, report every process's path lookups too
 * (without it, only explicitly followed processes' lookups are reported). */
#define PIO_SETTING_LOOKUPS_ALL 2
/* `settings` bit: with FOLLOW_ALL, report a process's path lookups for
 * `lookup_window_ns` after its exec (its launch), and those of the processes
 * it forks within that time, until the same deadline. */
#define PIO_SETTING_LOOKUPS_LAUNCHES 4

/* Capacity of the map of launching processes (least recently used go). */
#define PIO_MAX_LAUNCHING 8192

/* Capacity of the `quiet_pids` and `quiet_files` maps: processes whose hits
 * on listed files are not reported for a while (a launch replayed on a warm
 * cache), and those files. */
#define PIO_MAX_QUIET_PIDS 4096
#define PIO_MAX_QUIET_FILES 65536

/* A process of a quieted launch: until when, and the launch's set of files
 * (the launching process's tgid). */
struct pio_quiet {
	__u64 deadline_ns; /* CLOCK_MONOTONIC */
	__u32 set;
	__u32 pad;
};

/* A key of the `quiet_files` map: 16 bytes, as the user-space side lays it
 * out. */
struct pio_quiet_file {
	__u32 set;
	__u32 dev; /* the kernel's dev_t, as the records carry it */
	__u64 ino;
};

struct pio_record {
	__u64 time_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 ino;     /* inode number (0 for fork/exit) */
	__u64 first;   /* first page index */
	__u64 last;    /* last page index, inclusive (first + 2^order - 1 for miss/evict) */
	__u32 dev;     /* the kernel's dev_t: major << 20 | minor (not st_dev) */
	__u32 pid;     /* thread-group id of the process (fork: the parent) */
	__u32 aux;     /* fork: the child's pid; otherwise 0 */
	__u32 kind;    /* PIO_KIND_* */
};

_Static_assert(sizeof(struct pio_record) == PIO_RECORD_SIZE, "PIO_RECORD_SIZE is stale");

/*
 * An absolute path a process looked up (opened, stat'ed, accessed, read as a
 * link or exec'd): `aux` is its length without the NUL, 0 when it was cut or
 * unreadable. The path follows the record.
 */
struct pio_lookup {
	struct pio_record record;
	char path[PIO_PATH_BYTES];
};

/*
 * An exec: `aux` is how many bytes of the new program's command line follow
 * the record (0 when it could not be read).
 */
struct pio_exec {
	struct pio_record record;
	char args[PIO_ARGS_BYTES];
};

/*
 * An exec starting (`execve`/`execveat` entered with an absolute path), before
 * the kernel has looked the path up or read the program: `aux` is the path's
 * length without its NUL (0 when it was cut or unreadable), `first` how many
 * bytes of the command line follow in `args` (at most PIO_ARGS_BYTES; the
 * second half of `args` is room the program needs to copy the arguments in
 * with bounded offsets) and `ino` the caller's real uid. Whether the exec
 * will succeed is not known yet.
 */
struct pio_exec_start {
	struct pio_record record;
	char path[PIO_PATH_BYTES];
	char args[2 * PIO_ARGS_BYTES];
};

#endif
