// SPDX-License-Identifier: MIT OR GPL-2.0-only
/*
 * predictio's observation programs: page-cache and process-tree tracepoints
 * filtered in the kernel and written to one ring buffer.
 *
 * Cost rule: a process that is not observed must leave each program after a
 * map lookup or two, before any ring-buffer work. Every program therefore
 * starts with `process_wanted()` (or, for evictions that any process may
 * cause, the device filter).
 *
 * Wake-up rule: records are submitted with BPF_RB_NO_WAKEUP; the consumer polls
 * with a short timeout and drains. Only when the unread data crosses a
 * multiple of `wakeup_bytes` is the consumer woken at once, so a busy traced
 * reader does not pay a wake-up per record and an idle consumer still sees
 * records within its poll timeout.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "kernel.h"
#include "observe.h"

/*
 * The kernel lets only GPL-compatible programs call its GPL-only helpers;
 * "Dual MIT/GPL" is one of the strings it accepts (include/linux/license.h).
 */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Wake the consumer when this many bytes are unread (0: on every record). */
const volatile __u64 wakeup_bytes = 1 << 20;
/* Non-zero: only files on a device in `devices` are reported. */
const volatile __u32 filter_devices = 0;
/* Non-zero: only processes in this cgroup v2 (or below it) are reported. */
const volatile __u64 cgroup_id = 0;
/* Depth of `cgroup_id` in the hierarchy (the root is 0). */
const volatile __u32 cgroup_level = 0;
/* Non-zero: sched_process_exit has `group_dead` (Linux 6.16+); otherwise the
 * exit of the thread-group leader stands for the group's. */
const volatile __u32 exit_has_group_dead = 1;
/* Non-zero: the folio tracepoints carry `order`; otherwise (the page-based
 * records of Linux 5.14/5.15) a miss or eviction is one page. */
const volatile __u32 folio_has_order = 1;
/* Non-zero: evictions are reported whichever process causes them (reclaim,
 * another process's fadvise); the device filter still applies. */
const volatile __u32 evictions_any_process = 0;
/* Non-zero: this process's page-cache accesses and misses are not reported
 * (a daemon's own prefetches, which it would only throw away). */
const volatile __u32 ignore_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

/* Followed processes (thread-group ids). A fork of a followed process adds the
 * child here; the exit of its whole thread group removes it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

/* A process in its launch, under PIO_SETTING_LOOKUPS_LAUNCHES: its path
 * lookups are reported until `deadline_ns` (CLOCK_MONOTONIC), at most `left`
 * more of them. */
struct pio_launch {
	__u64 deadline_ns;
	__s64 left;
};

/* Processes in their launch, by thread-group id. Set at exec; a fork within
 * it gives the child the same deadline and what is left of the budget; exit
 * removes it. An LRU map, so a burst of execs pushes out the oldest instead
 * of failing. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PIO_MAX_LAUNCHING);
	__type(key, __u32);
	__type(value, struct pio_launch);
} launching SEC(".maps");

/* Page-cache hits that need not be reported for a while: the daemon found a
 * launch warm when it came to replay it, so the launch is neither replayed,
 * learned nor scored, and its hits on its profile's files (thousands a
 * launch) would only be thrown away. A process of such a launch is in
 * `quiet_pids` until the deadline (a fork carries it to the child, exit
 * removes it); the files are `quiet_files` of its set. Misses, evictions,
 * its other files and every other process are reported as ever. LRU maps:
 * bounded, the oldest go first. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PIO_MAX_QUIET_PIDS);
	__type(key, __u32);
	__type(value, struct pio_quiet);
} quiet_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PIO_MAX_QUIET_FILES);
	__type(key, struct pio_quiet_file);
	__type(value, __u8);
} quiet_files SEC(".maps");

/* Whether `tgid`'s hits on the file are not to be reported now. */
static __always_inline int quiet_now(__u32 tgid, __u32 dev, __u64 ino)
{
	struct pio_quiet *quiet = bpf_map_lookup_elem(&quiet_pids, &tgid);
	if (!quiet || bpf_ktime_get_ns() >= quiet->deadline_ns)
		return 0;
	struct pio_quiet_file file = { .set = quiet->set, .dev = dev, .ino = ino };
	return bpf_map_lookup_elem(&quiet_files, &file) != 0;
}

/* How long after its exec a process's lookups are reported under
 * PIO_SETTING_LOOKUPS_LAUNCHES, ns, and how many at most. */
const volatile __u64 lookup_window_ns = 0;
const volatile __u32 lookup_budget = 0;

/* Devices of interest (kernel dev_t), when `filter_devices` is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PIO_MAX_DEVICES);
	__type(key, __u32);
	__type(value, __u8);
} devices SEC(".maps");

/* Run-time switches (PIO_SETTING_* bits) and the consumer's sleep
 * (PIO_SLEEPING_KEY), changed by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} settings SEC(".maps");

/* Per-CPU counters of what could not be done: PIO_LOST_RECORDS (ring
 * buffer full), PIO_LOST_FOLLOWS (followed set full: a child not followed). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PIO_LOST_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline __u32 current_tgid(void)
{
	return bpf_get_current_pid_tgid() >> 32;
}

static __always_inline __u32 settings_bits(void)
{
	__u32 key = PIO_SETTINGS_KEY;
	__u32 *value = bpf_map_lookup_elem(&settings, &key);
	return value ? *value : 0;
}

static __always_inline int follow_all(void)
{
	return settings_bits() & PIO_SETTING_FOLLOW_ALL;
}

/* Under follow-all with PIO_SETTING_LOOKUPS_LAUNCHES. */
static __always_inline int launches_looked_up(void)
{
	__u32 want = PIO_SETTING_FOLLOW_ALL | PIO_SETTING_LOOKUPS_LAUNCHES;
	return (settings_bits() & want) == want && lookup_window_ns;
}

static __always_inline int cgroup_wanted(void)
{
	return !cgroup_id || bpf_get_current_ancestor_cgroup_id(cgroup_level) == cgroup_id;
}

static __always_inline int process_wanted(__u32 tgid)
{
	if (!follow_all() && !bpf_map_lookup_elem(&followed, &tgid))
		return 0;
	return cgroup_wanted();
}

/* Page-cache accesses and misses: a wanted process, not the ignored one. */
static __always_inline int pages_wanted(__u32 tgid)
{
	return (!ignore_tgid || tgid != ignore_tgid) && process_wanted(tgid);
}

static __always_inline int device_wanted(__u32 dev)
{
	return !filter_devices || bpf_map_lookup_elem(&devices, &dev);
}

/* Bytes a record takes in the ring: the record and the ring's 8-byte header. */
#define RING_RECORD_BYTES (sizeof(struct pio_record) + 8)

/*
 * Wake the consumer when the unread data crosses a multiple of
 * `wakeup_bytes`: once per `wakeup_bytes` of records. Waking on every record
 * above the threshold instead would cost each record an interrupt-work
 * wake-up exactly when the consumer is already behind (measured: a traced
 * reader 4.5x slower while its consumer was not draining).
 */
static __always_inline __u64 wakeup_flags(int urgent)
{
	if (urgent || wakeup_bytes <= RING_RECORD_BYTES)
		return BPF_RB_FORCE_WAKEUP; /* also keeps the subtraction below from wrapping */
	/* The consumer sleeps on an emptied ring: this record ends the sleep
	 * (it then polls on its own timeout while records flow). */
	__u32 key = PIO_SLEEPING_KEY;
	__u32 *sleeping = bpf_map_lookup_elem(&settings, &key);
	if (sleeping && *sleeping) {
		*sleeping = 0;
		return BPF_RB_FORCE_WAKEUP;
	}
	__u64 unread = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	if (unread >= wakeup_bytes && unread / wakeup_bytes != (unread - RING_RECORD_BYTES) / wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void count_lost(__u32 counter)
{
	__u64 *count = bpf_map_lookup_elem(&lost, &counter);
	if (count)
		*count += 1;
}

/* Reserves `size` bytes of the ring, or counts a lost record and returns
 * NULL when it is full. */
static __always_inline void *reserve(__u64 size)
{
	void *slot = bpf_ringbuf_reserve(&events, size, 0);
	if (!slot)
		count_lost(PIO_LOST_RECORDS);
	return slot;
}

/* Fills a reserved record, stamped now. */
static __always_inline void fill(struct pio_record *record, __u32 kind, __u32 pid, __u32 dev, __u64 ino,
				 __u64 first, __u64 last, __u32 aux)
{
	record->time_ns = bpf_ktime_get_ns();
	record->ino = ino;
	record->first = first;
	record->last = last;
	record->dev = dev;
	record->pid = pid;
	record->aux = aux;
	record->kind = kind;
}

/* Writes one record. `urgent` wakes the consumer at once whatever the fill:
 * for rare records a policy reacts to (an exec starts a launch replay). */
static __always_inline void emit(__u32 kind, __u32 pid, __u32 dev, __u64 ino, __u64 first,
				 __u64 last, __u32 aux, int urgent)
{
	struct pio_record *record = reserve(sizeof(*record));
	if (!record)
		return;
	fill(record, kind, pid, dev, ino, first, last, aux);
	bpf_ringbuf_submit(record, wakeup_flags(urgent));
}

/*
 * The hot paths (every buffered read, every mmap fault) are BTF-typed
 * tracepoints: the program gets the tracepoint's arguments as they are, with
 * none of the cost of a classic tracepoint, which formats its record before
 * any program runs. That matters most for the processes we filter out.
 * Arguments (include/trace/events/filemap.h):
 *   mm_filemap_get_pages(struct address_space *mapping, pgoff_t index, pgoff_t last_index)
 *   mm_filemap_map_pages(struct address_space *mapping, pgoff_t index, pgoff_t last_index)
 *   mm_filemap_fault(struct address_space *mapping, pgoff_t index)
 * `last_index` is inclusive. Ranges are clamped to the file's size.
 */

/* What the classic tracepoints record as `s_dev`. */
static __always_inline __u32 mapping_dev(struct inode *host)
{
	struct super_block *sb = host->i_sb;
	return sb ? sb->s_dev : host->i_rdev;
}

/* include/uapi/linux/magic.h */
#define PIO_TMPFS_MAGIC 0x01021994
#define PIO_RAMFS_MAGIC 0x858458f6

/*
 * Whether the file lives in memory only: tmpfs (`/dev/shm`, a tmpfs `/tmp`,
 * and every memfd and shared anonymous mapping) or ramfs. Nothing of such a
 * file is ever read from storage, so no policy can do anything with it. A
 * browser maps its memfds thousands of times a launch, and each new one sent
 * the daemon looking through its process's mappings for it.
 */
static __always_inline int in_memory_only(struct inode *host)
{
	struct super_block *sb = host->i_sb;
	if (!sb)
		return 0;
	unsigned long magic = sb->s_magic;
	return magic == PIO_TMPFS_MAGIC || magic == PIO_RAMFS_MAGIC;
}

static __always_inline int on_mapping(struct address_space *mapping, __u64 first, __u64 last, __u32 kind)
{
	__u32 tgid = current_tgid();
	if (!pages_wanted(tgid))
		return 0;
	struct inode *host = mapping->host;
	if (!host || in_memory_only(host))
		return 0;
	/* The tracepoints give the pages asked for (`cat` asks for 128 KiB
	 * whatever the file's size); report only those that exist, and nothing
	 * for a read at end of file. */
	__s64 size = host->i_size;
	if (size <= 0)
		return 0;
	__u64 eof_last = (__u64)(size - 1) >> PIO_PAGE_SHIFT;
	if (first > eof_last)
		return 0;
	if (last > eof_last)
		last = eof_last;
	__u32 dev = mapping_dev(host);
	if (!device_wanted(dev))
		return 0;
	if (quiet_now(tgid, dev, host->i_ino))
		return 0;
	emit(kind, tgid, dev, host->i_ino, first, last, 0, 0);
	return 0;
}

SEC("tp_btf/mm_filemap_get_pages")
int pio_get_pages(__u64 *ctx)
{
	return on_mapping((struct address_space *)ctx[0], ctx[1], ctx[2], PIO_KIND_READ);
}

SEC("tp_btf/mm_filemap_map_pages")
int pio_map_pages(__u64 *ctx)
{
	return on_mapping((struct address_space *)ctx[0], ctx[1], ctx[2], PIO_KIND_MAP_PAGES);
}

SEC("tp_btf/mm_filemap_fault")
int pio_fault(__u64 *ctx)
{
	return on_mapping((struct address_space *)ctx[0], ctx[1], ctx[1], PIO_KIND_FAULT);
}

/* The last page of a folio record's folio. */
static __always_inline __u64 folio_last(struct tp_filemap_folio *ctx, __u64 first)
{
	__u32 order = folio_has_order ? ctx->order & 31 : 0;
	return first + (1ULL << order) - 1;
}

/*
 * What every classic tracepoint program returns. The kernel hands a classic
 * tracepoint's record to the perf events open on it only when the BPF
 * programs attached there return non-zero: returning 0 would blind every
 * perf user of these tracepoints (`perf record`, predictio's own perf
 * fallback, another observer) for as long as this observer is loaded.
 */
#define PIO_PASS_ON 1

/*
 * Misses and evictions stay classic tracepoints: their argument is a folio,
 * whose order lives in flag words that have changed shape across kernels,
 * while the classic record carries it ready-made (checked against tracefs at
 * load). They follow I/O or reclaim, so the record's cost is small beside
 * what they report.
 */
SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int pio_add_page(struct tp_filemap_folio *ctx)
{
	__u32 tgid = current_tgid();
	if (!pages_wanted(tgid))
		return PIO_PASS_ON;
	__u32 dev = ctx->s_dev;
	if (!device_wanted(dev))
		return PIO_PASS_ON;
	__u64 first = ctx->index;
	emit(PIO_KIND_MISS, tgid, dev, ctx->i_ino, first, folio_last(ctx, first), 0, 0);
	return PIO_PASS_ON;
}

SEC("tracepoint/filemap/mm_filemap_delete_from_page_cache")
int pio_delete_page(struct tp_filemap_folio *ctx)
{
	__u32 tgid = current_tgid();
	if (!evictions_any_process && !process_wanted(tgid))
		return PIO_PASS_ON;
	__u32 dev = ctx->s_dev;
	if (!device_wanted(dev))
		return PIO_PASS_ON;
	__u64 first = ctx->index;
	emit(PIO_KIND_EVICT, tgid, dev, ctx->i_ino, first, folio_last(ctx, first), 0, 0);
	return PIO_PASS_ON;
}

SEC("tracepoint/sched/sched_process_exec")
int pio_exec(void *ctx)
{
	__u32 tgid = current_tgid();
	if (launches_looked_up()) {
		struct pio_launch launch = {
			.deadline_ns = bpf_ktime_get_ns() + lookup_window_ns,
			.left = lookup_budget,
		};
		bpf_map_update_elem(&launching, &tgid, &launch, BPF_ANY);
	}
	if (!process_wanted(tgid))
		return PIO_PASS_ON;
	struct pio_exec *exec = reserve(sizeof(*exec));
	if (!exec)
		return PIO_PASS_ON;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct mm_struct *mm = BPF_CORE_READ(task, mm);
	struct inode *inode = BPF_CORE_READ(mm, exe_file, f_inode);
	__u64 ino = 0;
	__u32 dev = 0;
	if (inode) {
		ino = BPF_CORE_READ(inode, i_ino);
		dev = BPF_CORE_READ(inode, i_sb, s_dev);
	}
	/* The new program's command line, just copied onto its stack by the
	 * exec: resident, so readable here. What makes this launch's profile
	 * its own (predictio's command shape) is in its first bytes. */
	unsigned long arg_start = BPF_CORE_READ(mm, arg_start);
	unsigned long arg_end = BPF_CORE_READ(mm, arg_end);
	__u64 len = arg_end > arg_start ? arg_end - arg_start : 0;
	if (len > PIO_ARGS_BYTES)
		len = PIO_ARGS_BYTES;
	if (len && bpf_probe_read_user(exec->args, len, (const void *)arg_start))
		len = 0;
	fill(&exec->record, PIO_KIND_EXEC, tgid, dev, ino, 0, 0, (__u32)len);
	bpf_ringbuf_submit(exec, wakeup_flags(1));
	return PIO_PASS_ON;
}

/* Whether the user-space string at `user_path` starts with '/'. */
static __always_inline int user_path_is_absolute(const char *user_path)
{
	char first = 0;
	return !bpf_probe_read_user(&first, 1, user_path) && first == '/';
}

/*
 * Copies the user-space path into a record's `path` (PIO_PATH_BYTES) and
 * returns its length without the NUL: 0 when it was unreadable, or filled
 * the buffer and so may have been cut (not reported).
 */
static __always_inline __u32 copy_user_path(char *path, const char *user_path)
{
	long len = bpf_probe_read_user_str(path, PIO_PATH_BYTES, user_path);
	return len > 1 && len < PIO_PATH_BYTES ? len - 1 : 0;
}

/* Arguments copied into an exec-start record at most. */
#define PIO_EXEC_START_ARGS 32

/*
 * An exec starting: the path and command line the caller passed, read from
 * its memory at the system call's entry. The exec itself first looks the
 * path up and reads the program's headers (and, for a large program, the
 * read-around of its first faults) — milliseconds, cold, before
 * sched_process_exec fires — so a launch replay started here gets that much
 * of a head start. The caller's real uid goes with it: a replay started from
 * here is one the same user's earlier exec of the same path and command
 * shape led to (the policy pairs them), never a path taken on trust.
 */
static __always_inline int on_exec_start(const char *user_path, const char *const *user_argv)
{
	__u32 tgid = current_tgid();
	if (!process_wanted(tgid))
		return 0;
	if (!user_path_is_absolute(user_path))
		return 0;
	struct pio_exec_start *start = reserve(sizeof(*start));
	if (!start)
		return 0;
	__u32 reported = copy_user_path(start->path, user_path);
	__u32 off = 0;
	for (int i = 0; i < PIO_EXEC_START_ARGS && user_argv; i++) {
		const char *arg = 0;
		if (off >= PIO_ARGS_BYTES || bpf_probe_read_user(&arg, sizeof(arg), &user_argv[i]) || !arg)
			break;
		/* off < PIO_ARGS_BYTES, so the copy ends inside `args` (twice
		 * that); what lands past PIO_ARGS_BYTES is not reported. The
		 * compiler knows the bound and would drop a plain mask, which
		 * the verifier needs: the empty asm hides it. */
		__u32 at = off;
		asm volatile("" : "+r"(at));
		at &= PIO_ARGS_BYTES - 1;
		long n = bpf_probe_read_user_str(&start->args[at], PIO_ARGS_BYTES, arg);
		if (n <= 0)
			break;
		off += n;
	}
	if (off > PIO_ARGS_BYTES)
		off = PIO_ARGS_BYTES;
	__u32 uid = (__u32)bpf_get_current_uid_gid();
	fill(&start->record, PIO_KIND_EXEC_START, tgid, 0, uid, off, 0, reported);
	bpf_ringbuf_submit(start, wakeup_flags(1));
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execve")
int pio_exec_start(struct tp_sys_enter *ctx)
{
	on_exec_start((const char *)ctx->args[0], (const char *const *)ctx->args[1]);
	return PIO_PASS_ON;
}

/* execveat(dirfd, path, argv, envp, flags): an absolute path ignores dirfd. */
SEC("tracepoint/syscalls/sys_enter_execveat")
int pio_exec_start_at(struct tp_sys_enter *ctx)
{
	on_exec_start((const char *)ctx->args[1], (const char *const *)ctx->args[2]);
	return PIO_PASS_ON;
}

/* A raw tracepoint: the classic one carries only pids, and telling a new
 * process from a new thread needs the child's task (pid == tgid). */
SEC("raw_tracepoint/sched_process_fork")
int pio_fork(struct bpf_raw_tracepoint_args *ctx)
{
	/* The parent runs the fork, so the current task is the parent. */
	__u32 parent = current_tgid();
	int explicitly_followed = bpf_map_lookup_elem(&followed, &parent) != 0;
	if (!explicitly_followed && !follow_all())
		return 0;
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 child_pid = BPF_CORE_READ(child, pid);
	__u32 child_tgid = BPF_CORE_READ(child, tgid);
	if (child_pid != child_tgid)
		return 0; /* a thread of the same process */
	if (explicitly_followed) {
		__u8 one = 1;
		if (bpf_map_update_elem(&followed, &child_tgid, &one, BPF_ANY))
			count_lost(PIO_LOST_FOLLOWS);
	}
	if (launches_looked_up()) {
		/* A child forked during its parent's launch is part of it (a
		 * shell's pipeline, Chromium's zygote) until the same deadline. */
		struct pio_launch *launch = bpf_map_lookup_elem(&launching, &parent);
		if (launch && bpf_ktime_get_ns() < launch->deadline_ns && launch->left > 0) {
			struct pio_launch inherited = *launch;
			bpf_map_update_elem(&launching, &child_tgid, &inherited, BPF_ANY);
		}
	}
	struct pio_quiet *quiet = bpf_map_lookup_elem(&quiet_pids, &parent);
	if (quiet && bpf_ktime_get_ns() < quiet->deadline_ns) {
		struct pio_quiet inherited = *quiet;
		bpf_map_update_elem(&quiet_pids, &child_tgid, &inherited, BPF_ANY);
	}
	if (!cgroup_wanted())
		return 0;
	emit(PIO_KIND_FORK, parent, 0, 0, 0, 0, child_tgid, 0);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int pio_exit(struct tp_sched_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (exit_has_group_dead ? !ctx->group_dead : (__u32)pid_tgid != tgid)
		return PIO_PASS_ON; /* a thread, or not the last one */
	bpf_map_delete_elem(&launching, &tgid);
	bpf_map_delete_elem(&quiet_pids, &tgid);
	int explicitly_followed = bpf_map_lookup_elem(&followed, &tgid) != 0;
	if (explicitly_followed)
		bpf_map_delete_elem(&followed, &tgid);
	else if (!follow_all())
		return PIO_PASS_ON;
	if (!cgroup_wanted())
		return PIO_PASS_ON;
	emit(PIO_KIND_EXIT, tgid, 0, 0, 0, 0, 0, 0);
	return PIO_PASS_ON;
}

/*
 * Paths the process looks up: the first argument that names a file of the
 * path system calls (open, stat, access, readlink, exec and their *at
 * forms). A cold lookup reads directory blocks, and for a name that exists
 * its inode, one synchronous read at a time; a launch replay repeats the
 * launch's lookups on the executor's metadata threads so those blocks are
 * cached before the program asks. Absolute paths only: a relative one needs
 * the process's working directory or a descriptor, which are gone by the
 * time a recording is named.
 *
 * Reported for explicitly followed processes (`predictio record`/`run`).
 * Under follow-all (the daemon), with PIO_SETTING_LOOKUPS_LAUNCHES for the
 * processes in their launch (the `launching` map; each report uses one of
 * the launch's budget), or with PIO_SETTING_LOOKUPS_ALL for everyone, every
 * path call then costing a record. For a launch, `budget` is set to what
 * is left of it, for the caller to use one of when it reports.
 */
static __always_inline int lookups_wanted(__u32 tgid, __s64 **budget)
{
	if (bpf_map_lookup_elem(&followed, &tgid))
		return cgroup_wanted();
	__u32 bits = settings_bits();
	if (!(bits & PIO_SETTING_FOLLOW_ALL))
		return 0;
	if (!(bits & PIO_SETTING_LOOKUPS_ALL)) {
		if (!(bits & PIO_SETTING_LOOKUPS_LAUNCHES))
			return 0;
		struct pio_launch *launch = bpf_map_lookup_elem(&launching, &tgid);
		if (!launch || launch->left <= 0 || bpf_ktime_get_ns() >= launch->deadline_ns)
			return 0;
		*budget = &launch->left;
	}
	return cgroup_wanted();
}

static __always_inline int on_path(const char *user_path)
{
	__u32 tgid = current_tgid();
	__s64 *budget = 0;
	if (!lookups_wanted(tgid, &budget))
		return 0;
	if (!user_path_is_absolute(user_path))
		return 0;
	/* Threads racing here may overshoot a launch's budget by one each. */
	if (budget)
		__sync_fetch_and_add(budget, -1);
	struct pio_lookup *lookup = reserve(sizeof(*lookup));
	if (!lookup)
		return 0;
	__u32 reported = copy_user_path(lookup->path, user_path);
	fill(&lookup->record, PIO_KIND_LOOKUP, tgid, 0, 0, 0, 0, reported);
	bpf_ringbuf_submit(lookup, wakeup_flags(0));
	return 0;
}

/* Calls whose path is the second argument (after a directory descriptor). */
#define PATH_AT(call)                                                   \
	SEC("tracepoint/syscalls/sys_enter_" #call)                    \
	int pio_path_##call(struct tp_sys_enter *ctx)                  \
	{                                                              \
		on_path((const char *)ctx->args[1]);                   \
		return PIO_PASS_ON;                                    \
	}
/* Calls whose path is the first argument. */
#define PATH_FIRST(call)                                                \
	SEC("tracepoint/syscalls/sys_enter_" #call)                    \
	int pio_path_##call(struct tp_sys_enter *ctx)                  \
	{                                                              \
		on_path((const char *)ctx->args[0]);                   \
		return PIO_PASS_ON;                                    \
	}

PATH_AT(openat)
PATH_AT(newfstatat)
PATH_AT(statx)
PATH_AT(faccessat)
PATH_AT(faccessat2)
PATH_AT(readlinkat)
PATH_FIRST(execve)
PATH_FIRST(open)
PATH_FIRST(newstat)
PATH_FIRST(newlstat)
PATH_FIRST(access)
PATH_FIRST(readlink)
