/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * The kernel types the programs read, declared by hand instead of a generated
 * vmlinux.h.
 *
 * Two kinds:
 *  - CO-RE types (`preserve_access_index`): only the fields we read. clang
 *    records each access by field *name*; the loader (aya) rewrites the
 *    offsets against the running kernel's BTF (/sys/kernel/btf/vmlinux), so
 *    these need no pinning to a kernel version and nothing large is committed.
 *    BTF-typed tracepoint programs (tp_btf) read these directly: the
 *    verifier knows each argument's kernel type, so a changed prototype fails
 *    to load rather than reporting garbage.
 *  - Tracepoint records: plain structs laid out as the tracefs `format` files
 *    of Linux 6.x say. Their offsets are fixed at compile time, so the loader
 *    (src/layout.rs) compares each field with
 *    /sys/kernel/tracing/events/CATEGORY/NAME/format before attaching and
 *    refuses to run on a mismatch.
 */
#ifndef PREDICTIO_KERNEL_H
#define PREDICTIO_KERNEL_H

struct super_block {
	__u32 s_dev; /* dev_t */
	unsigned long s_magic;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	long long i_size; /* loff_t */
	__u32 i_rdev;     /* dev_t */
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct address_space {
	struct inode *host;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct mm_struct {
	struct file *exe_file;
	unsigned long arg_start; /* the command line: NUL-terminated arguments */
	unsigned long arg_end;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

/* The 8 bytes of common_type, common_flags, common_preempt_count, common_pid. */
struct tp_common {
	__u64 common;
};

/* filemap:mm_filemap_add_to_page_cache and mm_filemap_delete_from_page_cache. */
struct tp_filemap_folio {
	struct tp_common common;
	unsigned long pfn;   /* offset 8 */
	unsigned long i_ino; /* offset 16 */
	unsigned long index; /* offset 24 */
	__u32 s_dev;         /* offset 32 */
	__u8 order;          /* offset 36; read only where tracefs lists it */
};

/* sched:sched_process_exit. */
struct tp_sched_exit {
	struct tp_common common;
	char comm[16];   /* offset 8 */
	int pid;         /* offset 24 */
	int prio;        /* offset 28 */
	__u8 group_dead; /* offset 32; Linux 6.16+, read only where tracefs lists it */
};

/* syscalls:sys_enter_*: the call's arguments, 8 bytes each. */
struct tp_sys_enter {
	struct tp_common common;
	__u64 nr;       /* offset 8: int __syscall_nr, padded */
	__u64 args[6]; /* offset 16 */
};

#endif
