use super::*;

/// Writes BTF blobs by hand: types get ids 1, 2, ... in the order they are added.
struct Builder {
    types: Vec<u8>,
    strings: Vec<u8>,
    next_id: u32,
}

impl Builder {
    fn new() -> Self {
        Builder {
            types: Vec::new(),
            strings: vec![0],
            next_id: 1,
        }
    }

    fn str(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    fn raw(
        &mut self,
        name: &str,
        kind: u32,
        vlen: u32,
        kind_flag: bool,
        size_or_type: u32,
        extra: &[u32],
    ) -> u32 {
        let name_off = self.str(name);
        let info = (u32::from(kind_flag) << 31) | (kind << 24) | vlen;
        for w in [name_off, info, size_or_type].iter().chain(extra) {
            self.types.extend_from_slice(&w.to_le_bytes());
        }
        self.next_id += 1;
        self.next_id - 1
    }

    fn int(&mut self, name: &str, size: u32) -> u32 {
        self.raw(name, KIND_INT, 0, false, size, &[size * 8])
    }

    fn composite(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        kind_flag: bool,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let mut extra = Vec::new();
        for &(m, ty, off) in members {
            extra.extend([self.str(m), ty, off]);
        }
        self.raw(name, kind, members.len() as u32, kind_flag, size, &extra)
    }

    /// Members are (name, type, bit offset).
    fn strukt(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        self.composite(KIND_STRUCT, name, size, false, members)
    }

    fn union(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        self.composite(KIND_UNION, name, size, false, members)
    }

    fn enum32(&mut self, name: &str, signed: bool, values: &[(&str, i32)]) -> u32 {
        let mut extra = Vec::new();
        for &(n, v) in values {
            extra.extend([self.str(n), v as u32]);
        }
        self.raw(name, KIND_ENUM, values.len() as u32, signed, 4, &extra)
    }

    fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
        let mut extra = Vec::new();
        for &(n, v) in values {
            extra.extend([self.str(n), v as u32, (v >> 32) as u32]);
        }
        self.raw(name, KIND_ENUM64, values.len() as u32, signed, 8, &extra)
    }

    fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let words = [
            u32::from(MAGIC) | (1 << 16), // magic, version 1, flags 0
            HEADER_LEN as u32,
            0,
            self.types.len() as u32,
            self.types.len() as u32,
            self.strings.len() as u32,
        ];
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// A blob exercising every lookup the tests make, plus one record of every kind so that
/// skipping trailing data is checked too (a wrong skip shifts every later id).
fn sample() -> Vec<u8> {
    let mut b = Builder::new();
    let u32_t = b.int("u32", 4); // 1
    let u64_t = b.int("u64", 8); // 2
                                 // Every kind's trailing data, before the types the tests look up.
    let ptr = b.raw("", KIND_PTR, 0, false, u64_t, &[]);
    b.raw("", KIND_ARRAY, 0, false, 0, &[u32_t, u32_t, 3]);
    b.raw(
        "proto",
        KIND_FUNC_PROTO,
        2,
        false,
        u32_t,
        &[0, u32_t, 0, u64_t],
    );
    b.raw("func", KIND_FUNC, 0, false, 5, &[]);
    b.raw("var", KIND_VAR, 0, false, u32_t, &[1]);
    b.raw(".data", KIND_DATASEC, 1, false, 4, &[7, 0, 4]);
    b.raw("double", KIND_FLOAT, 0, false, 8, &[]);
    b.raw("tag", KIND_DECL_TAG, 0, false, u32_t, &[u32::MAX]);
    b.raw("user", KIND_TYPE_TAG, 0, false, u64_t, &[]);
    b.raw("", KIND_VOLATILE, 0, false, u32_t, &[]);
    b.raw("", KIND_RESTRICT, 0, false, ptr, &[]);

    // A forward declaration and an empty definition precede the real `inner`.
    b.raw("inner", KIND_FWD, 0, false, 0, &[]);
    b.strukt("inner", 0, &[]);
    let inner = b.strukt("inner", 16, &[("a", u64_t, 0), ("b", u64_t, 64)]);
    b.strukt("inner", 32, &[("late", u64_t, 0)]);
    b.strukt("outer", 24, &[("x", u32_t, 0), ("in", inner, 64)]);

    // struct with_anon { u32 head; union { u64 u1; struct { u32 s1; u32 s2; }; }; u64 tail; }
    let anon_s = b.strukt("", 8, &[("s1", u32_t, 0), ("s2", u32_t, 32)]);
    let anon_u = b.union("", 8, &[("u1", u64_t, 0), ("", anon_s, 0)]);
    b.strukt(
        "with_anon",
        24,
        &[("head", u32_t, 0), ("", anon_u, 64), ("tail", u64_t, 128)],
    );

    // typedef struct inner inner_t; struct holder { u32 x; const inner_t t; };
    let inner_t = b.raw("inner_t", KIND_TYPEDEF, 0, false, inner, &[]);
    let const_inner_t = b.raw("", KIND_CONST, 0, false, inner_t, &[]);
    b.strukt("holder", 20, &[("x", u32_t, 0), ("t", const_inner_t, 32)]);

    // struct with_array { u32 n; u64 arr[4]; struct inner *p; }
    let arr = b.raw("", KIND_ARRAY, 0, false, 0, &[u64_t, u32_t, 4]);
    let inner_ptr = b.raw("", KIND_PTR, 0, false, inner, &[]);
    b.strukt(
        "with_array",
        48,
        &[("n", u32_t, 0), ("arr", arr, 64), ("p", inner_ptr, 320)],
    );

    // Bitfields, both encodings: in the offset word (kind_flag) and in the INT type.
    b.composite(
        KIND_STRUCT,
        "bits_kf",
        8,
        true,
        &[("whole", u32_t, 0), ("flag", u32_t, (3 << 24) | 32)],
    );
    let int3 = b.raw("", KIND_INT, 0, false, 4, &[3]);
    b.strukt("bits_int", 8, &[("whole", u32_t, 0), ("flag", int3, 32)]);

    b.union("only_union", 8, &[("v", u64_t, 0), ("w", u32_t, 0)]);

    b.enum32("", false, &[("E_ZERO", 0), ("E_TWO", 2)]);
    b.enum32("signed_e", true, &[("E_NEG", -5)]);
    b.enum32("unsigned_e", false, &[("E_BIG", -1)]);
    b.enum64("wide", false, &[("W_BIG", 1 << 40), ("W_MAX", u64::MAX)]);
    b.enum64("wide_signed", true, &[("W_NEG", (-7i64) as u64)]);
    b.build()
}

fn btf() -> Btf {
    Btf::parse(&sample()).expect("sample BTF parses")
}

fn is_malformed(r: Result<impl std::fmt::Debug, BtfError>) -> bool {
    matches!(r, Err(BtfError::Malformed(_)))
}

#[test]
fn nested_member() {
    let btf = btf();
    assert_eq!(btf.member_offset("outer", "x").unwrap(), 0);
    assert_eq!(btf.member_offset("outer", "in").unwrap(), 8);
    assert_eq!(btf.member_offset("outer", "in.b").unwrap(), 16);
    assert_eq!(btf.member_offset("inner", "b").unwrap(), 8);
}

#[test]
fn first_complete_struct_wins() {
    let btf = btf();
    assert_eq!(btf.struct_size("inner").unwrap(), 16);
    assert!(matches!(
        btf.member_offset("inner", "late"),
        Err(BtfError::Missing(_))
    ));
}

#[test]
fn anonymous_members_are_transparent() {
    let btf = btf();
    assert_eq!(btf.member_offset("with_anon", "u1").unwrap(), 8);
    assert_eq!(btf.member_offset("with_anon", "s1").unwrap(), 8);
    assert_eq!(btf.member_offset("with_anon", "s2").unwrap(), 12);
    assert_eq!(btf.member_offset("with_anon", "tail").unwrap(), 16);
}

#[test]
fn descends_through_typedef_and_const() {
    let btf = btf();
    assert_eq!(btf.member_offset("holder", "t").unwrap(), 4);
    assert_eq!(btf.member_offset("holder", "t.b").unwrap(), 12);
}

#[test]
fn array_and_pointer_members() {
    let btf = btf();
    assert_eq!(btf.member_offset("with_array", "arr").unwrap(), 8);
    assert_eq!(btf.member_offset("with_array", "p").unwrap(), 40);
    assert!(is_malformed(btf.member_offset("with_array", "arr.x")));
    // Pointers are not followed: the offset would be in another object.
    assert!(is_malformed(btf.member_offset("with_array", "p.a")));
    assert!(is_malformed(btf.member_offset("outer", "x.y")));
}

#[test]
fn bitfields_are_errors() {
    let btf = btf();
    assert_eq!(btf.member_offset("bits_kf", "whole").unwrap(), 0);
    assert!(is_malformed(btf.member_offset("bits_kf", "flag")));
    assert_eq!(btf.member_offset("bits_int", "whole").unwrap(), 0);
    assert!(is_malformed(btf.member_offset("bits_int", "flag")));
}

#[test]
fn top_level_union() {
    let btf = btf();
    assert_eq!(btf.struct_size("only_union").unwrap(), 8);
    assert_eq!(btf.member_offset("only_union", "w").unwrap(), 0);
}

#[test]
fn enumerators() {
    let btf = btf();
    assert_eq!(btf.enumerator("E_ZERO").unwrap(), 0);
    assert_eq!(btf.enumerator("E_TWO").unwrap(), 2);
    assert_eq!(btf.enumerator("E_NEG").unwrap(), -5);
    assert_eq!(btf.enumerator("E_BIG").unwrap(), i64::from(u32::MAX));
    assert_eq!(btf.enumerator("W_BIG").unwrap(), 1 << 40);
    assert_eq!(btf.enumerator("W_MAX").unwrap(), -1);
    assert_eq!(btf.enumerator("W_NEG").unwrap(), -7);
}

#[test]
fn missing_things() {
    let btf = btf();
    let err = btf.struct_size("nope").unwrap_err();
    assert!(
        matches!(&err, BtfError::Missing(m) if m == "struct nope"),
        "{err}"
    );
    assert!(
        matches!(btf.member_offset("nope", "a"), Err(BtfError::Missing(m)) if m == "struct nope")
    );
    let err = btf.member_offset("outer", "in.zzz").unwrap_err();
    assert!(
        matches!(&err, BtfError::Missing(m) if m == "field outer.in.zzz"),
        "{err}"
    );
    assert_eq!(err.to_string(), "kernel BTF has no field outer.in.zzz");
    assert!(matches!(
        btf.member_offset("outer", ""),
        Err(BtfError::Missing(_))
    ));
    assert!(matches!(btf.enumerator("NOPE"), Err(BtfError::Missing(m)) if m == "enumerator NOPE"));
    // A FWD alone does not make a struct.
    let mut b = Builder::new();
    b.raw("fwd_only", KIND_FWD, 0, false, 0, &[]);
    let btf = Btf::parse(&b.build()).unwrap();
    assert!(matches!(
        btf.struct_size("fwd_only"),
        Err(BtfError::Missing(_))
    ));
}

#[test]
fn bad_header() {
    let mut data = sample();
    data[0] = 0;
    assert!(is_malformed(Btf::parse(&data)));
    let mut data = sample();
    data.swap(0, 1);
    let err = Btf::parse(&data).err().unwrap();
    assert!(err.to_string().contains("big-endian"), "{err}");
    let mut data = sample();
    data[2] = 2;
    assert!(is_malformed(Btf::parse(&data)));
    let mut data = sample();
    data[4..8].copy_from_slice(&8u32.to_le_bytes()); // hdr_len < 24
    assert!(is_malformed(Btf::parse(&data)));
    assert!(is_malformed(Btf::parse(&[])));
}

#[test]
fn truncated_data_is_malformed() {
    let data = sample();
    for len in 0..data.len() {
        assert!(
            is_malformed(Btf::parse(&data[..len])),
            "prefix of {len} bytes"
        );
    }
    // A type section whose last record is cut short, with the strings intact.
    let mut b = Builder::new();
    b.int("u32", 4);
    let mut data = b.build();
    let type_len = b.types.len() as u32 - 2;
    data[12..16].copy_from_slice(&type_len.to_le_bytes());
    data[16..20].copy_from_slice(&type_len.to_le_bytes());
    data.drain(HEADER_LEN + type_len as usize..HEADER_LEN + type_len as usize + 2);
    assert!(is_malformed(Btf::parse(&data)));
}

#[test]
fn bad_records_are_malformed() {
    // Unknown kind.
    let mut b = Builder::new();
    b.raw("x", 20, 0, false, 0, &[]);
    assert!(is_malformed(Btf::parse(&b.build())));
    // A struct's name offset past the string section.
    let mut b = Builder::new();
    let u32_t = b.int("u32", 4);
    b.strukt("s", 4, &[("m", u32_t, 0)]);
    let mut data = b.build();
    let name_off = HEADER_LEN + 16;
    data[name_off..name_off + 4].copy_from_slice(&9999u32.to_le_bytes());
    assert!(is_malformed(Btf::parse(&data)));
    // Member type past the last type, and a typedef cycle: errors, not panics or hangs.
    let mut b = Builder::new();
    b.strukt("dangling", 8, &[("m", 42, 0)]);
    let cyc = b.next_id;
    b.raw("loop_t", KIND_TYPEDEF, 0, false, cyc, &[]);
    b.strukt("cyclic", 8, &[("m", cyc, 0)]);
    let btf = Btf::parse(&b.build()).unwrap();
    assert!(is_malformed(btf.member_offset("dangling", "m.x")));
    assert!(is_malformed(btf.member_offset("cyclic", "m.x")));
    // A struct that is its own anonymous member.
    let mut b = Builder::new();
    let id = b.next_id;
    b.strukt("selfish", 8, &[("", id, 0)]);
    let btf = Btf::parse(&b.build()).unwrap();
    assert!(is_malformed(btf.member_offset("selfish", "x")));
}

/// Corrupts the sample blob many ways; whatever happens must be an Ok or an Err, never a panic.
#[test]
fn corrupted_data_never_panics() {
    let data = sample();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut d = data.clone();
        for _ in 0..(next() % 4 + 1) {
            let i = (next() as usize) % d.len();
            d[i] = next() as u8;
        }
        if let Ok(btf) = Btf::parse(&d) {
            for (s, p) in [
                ("outer", "in.b"),
                ("with_anon", "s2"),
                ("holder", "t.b"),
                ("bits_int", "flag"),
            ] {
                let _ = btf.member_offset(s, p);
                let _ = btf.struct_size(s);
            }
            let _ = btf.enumerator("W_NEG");
            let _ = btf.enumerator("MISSING");
        }
    }
}

#[test]
fn io_error_names_the_path() {
    let err = Btf::from_file(Path::new("/nonexistent/btf")).err().unwrap();
    assert!(matches!(err, BtfError::Io { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("/nonexistent/btf") && msg.contains("CONFIG_DEBUG_INFO_BTF"),
        "{msg}"
    );
}

/// Runs against the running kernel's BTF, so it checks relations that hold on any kernel
/// rather than particular numbers.
#[test]
fn live_kernel_offsets() {
    let path = Path::new(VMLINUX_BTF);
    assert!(
        path.exists(),
        "{VMLINUX_BTF} is missing: this test needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    );
    let start = std::time::Instant::now();
    let btf = Btf::from_file(path).unwrap_or_else(|e| panic!("{e}"));
    let parse_time = start.elapsed();
    let o = kernel_offsets(&btf).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("parsed {VMLINUX_BTF} in {parse_time:?}: {o:#?}");

    assert_eq!(o.ready, 1);
    let task_size = btf.struct_size("task_struct").unwrap();
    let task_fields = [
        o.task_pid,
        o.task_tgid,
        o.task_start_boottime,
        o.task_comm,
        o.task_exit_code,
        o.task_utime,
        o.task_stime,
        o.task_sum_exec_runtime,
        o.task_min_flt,
        o.task_maj_flt,
        o.task_nvcsw,
        o.task_nivcsw,
        o.task_ioac,
        o.task_signal,
        o.task_mm,
        o.task_real_parent,
        o.task_children,
        o.task_sibling,
    ];
    for f in task_fields {
        assert!(
            f > 0 && f < task_size,
            "task_struct field at {f}, size {task_size}: {o:#?}"
        );
    }
    let signal_size = btf.struct_size("signal_struct").unwrap();
    let signal_fields = [
        o.signal_utime,
        o.signal_stime,
        o.signal_sum_sched_runtime,
        o.signal_min_flt,
        o.signal_maj_flt,
        o.signal_nvcsw,
        o.signal_nivcsw,
        o.signal_ioac,
        o.signal_live,
    ];
    for f in signal_fields {
        assert!(
            f > 0 && f < signal_size,
            "signal_struct field at {f}, size {signal_size}: {o:#?}"
        );
    }
    // Fields declared next to each other in every kernel version.
    assert_eq!(o.task_tgid, o.task_pid + 4);
    assert_eq!(o.task_stime, o.task_utime + 8);
    assert_eq!(o.task_nivcsw, o.task_nvcsw + 8);
    assert_eq!(o.task_maj_flt, o.task_min_flt + 8);
    assert_eq!(o.signal_stime, o.signal_utime + 8);
    assert_eq!(o.signal_nivcsw, o.signal_nvcsw + 8);
    assert_eq!(o.signal_maj_flt, o.signal_min_flt + 8);
    assert_eq!(
        o.task_sum_exec_runtime,
        btf.member_offset("task_struct", "se").unwrap()
            + btf
                .member_offset("sched_entity", "sum_exec_runtime")
                .unwrap()
    );

    assert_eq!(o.ioac_rchar, 0);
    assert_eq!(o.ioac_wchar, 8);
    assert!(o.ioac_read_bytes > o.ioac_wchar);
    assert_eq!(o.ioac_write_bytes, o.ioac_read_bytes + 8);

    let mm_size = btf.struct_size("mm_struct").unwrap();
    for f in [
        o.mm_hiwater_rss,
        o.mm_rss_stat,
        o.mm_arg_start,
        o.mm_arg_end,
    ] {
        assert!(
            f > 0 && f < mm_size,
            "mm_struct field at {f}, size {mm_size}: {o:#?}"
        );
    }
    assert_eq!(o.mm_arg_end, o.mm_arg_start + 8);
    assert!(o.percpu_counter_size >= 8);
    assert!(o.percpu_counter_count + 8 <= o.percpu_counter_size);
    assert!(o.bprm_filename > 0 && o.bprm_filename < btf.struct_size("linux_binprm").unwrap());

    assert_eq!(
        o.task_sibling,
        o.task_children + 16,
        "list_head is two pointers"
    );
    assert!(o.task_thread_pid > 0 && o.task_thread_pid < task_size);
    // struct upid { int nr; struct pid_namespace *ns; }, numbers[] the last member of struct pid.
    assert_eq!((o.upid_nr, o.upid_size), (0, 16));
    assert!(o.pid_level > 0 && o.pid_numbers > o.pid_level);
    // Tracepoint fields follow the 8-byte `struct trace_entry`.
    for f in [
        o.tp_fork_child_pid,
        o.tp_exec_filename_loc,
        o.tp_exec_old_pid,
    ] {
        assert!(f >= 8, "tracepoint field at {f}: {o:#?}");
    }
    assert!(o.tp_exec_old_pid > o.tp_exec_filename_loc);

    assert_eq!(o.mm_filepages, 0);
    assert_eq!(o.mm_anonpages, 1);
    assert!(o.mm_shmempages > o.mm_anonpages);
    assert!(i64::from(o.mm_shmempages) < btf.enumerator("NR_MM_COUNTERS").unwrap());
}

#[test]
fn the_attach_subset_keeps_the_named_targets_ids_for_aya() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let _noise = b.raw("btf_trace_other", KIND_TYPEDEF, 0, false, int, &[]);
    let _struct = b.strukt("task_struct", 8, &[("pid", int, 0)]);
    let switch = b.raw("btf_trace_sched_switch", KIND_TYPEDEF, 0, false, int, &[]);
    // A function of the same name as a wanted typedef is not it.
    let _decoy = b.raw("btf_trace_sched_wakeup", KIND_FUNC, 0, false, 0, &[]);
    let wakeup = b.raw("btf_trace_sched_wakeup", KIND_TYPEDEF, 0, false, int, &[]);
    let iter = b.raw("bpf_iter_task", KIND_FUNC, 1, false, 0, &[]);
    let btf = Btf::parse(&b.build()).unwrap();
    let blob = btf
        .attach_subset(
            &[
                "btf_trace_sched_switch",
                "btf_trace_sched_wakeup",
                "btf_trace_gone",
            ],
            &["bpf_iter_task"],
        )
        .unwrap();
    let subset = aya::Btf::parse(&blob, aya::Endianness::default()).unwrap();
    let typedef = |name| subset.id_by_type_name_kind(name, aya_obj::btf::BtfKind::Typedef);
    assert_eq!(typedef("btf_trace_sched_switch").unwrap(), switch);
    assert_eq!(typedef("btf_trace_sched_wakeup").unwrap(), wakeup);
    assert!(
        typedef("btf_trace_other").is_err(),
        "only what was asked for"
    );
    assert!(typedef("btf_trace_gone").is_err());
    let func = subset.id_by_type_name_kind("bpf_iter_task", aya_obj::btf::BtfKind::Func);
    assert_eq!(func.unwrap(), iter);
    // Our own parser reads it too.
    assert!(Btf::parse(&blob).is_ok());
}

/// On this machine's kernel: the subset's ids are those of aya's full parse.
#[test]
fn the_attach_subset_of_this_kernel_matches_a_full_parse() {
    let Ok(ours) = Btf::from_file(Path::new(VMLINUX_BTF)) else {
        eprintln!("no {VMLINUX_BTF}: nothing to compare");
        return;
    };
    let names = ["btf_trace_sched_switch", "btf_trace_sched_process_exit"];
    let blob = ours.attach_subset(&names, &["bpf_iter_task"]).unwrap();
    let subset = aya::Btf::parse(&blob, aya::Endianness::default()).unwrap();
    let full = aya::Btf::from_sys_fs().unwrap();
    for name in names {
        let kind = aya_obj::btf::BtfKind::Typedef;
        assert_eq!(
            subset.id_by_type_name_kind(name, kind).unwrap(),
            full.id_by_type_name_kind(name, kind).unwrap(),
            "{name}"
        );
    }
    let kind = aya_obj::btf::BtfKind::Func;
    assert_eq!(
        subset.id_by_type_name_kind("bpf_iter_task", kind).unwrap(),
        full.id_by_type_name_kind("bpf_iter_task", kind).unwrap()
    );
}

#[test]
fn many_structs_are_found_in_one_pass_as_one_by_one() {
    let btf = btf();
    let names = ["outer", "inner", "only_union", "nope", "with_anon"];
    let found = btf.find_structs(&names).unwrap();
    for name in names {
        assert_eq!(
            found.get(name).copied(),
            btf.find_struct(name).ok(),
            "{name}"
        );
    }
    assert!(!found.contains_key("nope"));
    assert_eq!(found.len(), 4);
}

#[test]
fn a_file_is_mapped_or_read_to_the_same_btf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("btf");
    std::fs::write(&path, sample()).unwrap();
    let from_file = Btf::from_file(&path).unwrap();
    assert_eq!(from_file.member_offset("outer", "in.b").unwrap(), 16);
    assert_eq!(from_file.enumerator("W_NEG").unwrap(), -7);
    // An empty file cannot be mapped: it is read, and is malformed.
    std::fs::write(&path, b"").unwrap();
    assert!(is_malformed(Btf::from_file(&path)));
}

/// `mm_struct`'s RSS counters as Linux 6.2 and later lay them out: `struct percpu_counter
/// rss_stat[NR_MM_COUNTERS]`, the value in each counter's `count`.
#[test]
fn rss_counters_in_an_array_of_percpu_counters() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let long = b.int("long", 8);
    let counter = b.strukt(
        "percpu_counter",
        40,
        &[("lock", int, 0), ("count", long, 64)],
    );
    let array = b.raw("", KIND_ARRAY, 0, false, 0, &[counter, int, 4]);
    let mm = b.strukt(
        "mm_struct",
        1000,
        &[("pad", long, 0), ("rss_stat", array, 800)],
    );
    let btf = Btf::parse(&b.build()).unwrap();
    assert_eq!(btf.rss_counters(mm).unwrap(), (100 + 8, 40, true));
}

/// ... and as Linux 6.1 and before do: `struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; }`,
/// the value in each atomic's `counter`.
#[test]
fn rss_counters_in_a_struct_of_atomics() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let long = b.int("long", 8);
    let atomic = b.strukt("", 8, &[("counter", long, 0)]);
    let atomic64 = b.raw("atomic64_t", KIND_TYPEDEF, 0, false, atomic, &[]);
    let atomic_long = b.raw("atomic_long_t", KIND_TYPEDEF, 0, false, atomic64, &[]);
    let array = b.raw("", KIND_ARRAY, 0, false, 0, &[atomic_long, int, 4]);
    let stat = b.strukt("mm_rss_stat", 32, &[("count", array, 0)]);
    let mm = b.strukt(
        "mm_struct",
        1000,
        &[("pad", long, 0), ("rss_stat", stat, 800)],
    );
    let btf = Btf::parse(&b.build()).unwrap();
    assert_eq!(btf.rss_counters(mm).unwrap(), (100, 8, false));
}

/// A tracepoint's `btf_trace_<name>` is a typedef of a pointer to a prototype whose first
/// parameter is the tracepoint's data: `sched_process_exit` has one argument on Linux 6.1 and two
/// since 6.16, and a program must not read the second where it does not exist.
#[test]
fn tracepoint_arguments_come_from_the_prototype() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let void_ptr = b.raw("", KIND_PTR, 0, false, 0, &[]);
    let (data, task, group_dead) = (b.str("__data"), b.str("p"), b.str("group_dead"));
    let one = b.raw(
        "",
        KIND_FUNC_PROTO,
        2,
        false,
        0,
        &[data, void_ptr, task, void_ptr],
    );
    let two = b.raw(
        "",
        KIND_FUNC_PROTO,
        3,
        false,
        0,
        &[data, void_ptr, task, void_ptr, group_dead, int],
    );
    let (ptr_one, ptr_two) = (
        b.raw("", KIND_PTR, 0, false, one, &[]),
        b.raw("", KIND_PTR, 0, false, two, &[]),
    );
    b.raw(
        "btf_trace_sched_process_exit",
        KIND_TYPEDEF,
        0,
        false,
        ptr_one,
        &[],
    );
    b.raw(
        "btf_trace_sched_switch",
        KIND_TYPEDEF,
        0,
        false,
        ptr_two,
        &[],
    );
    // Not a typedef: not a tracepoint's prototype.
    b.raw("btf_trace_sched_wakeup", KIND_FUNC, 0, false, one, &[]);
    let btf = Btf::parse(&b.build()).unwrap();
    let args = btf
        .tracepoint_args(&["sched_process_exit", "sched_switch", "sched_wakeup", "gone"])
        .unwrap();
    assert_eq!(args.get("sched_process_exit"), Some(&1));
    assert_eq!(args.get("sched_switch"), Some(&2));
    assert_eq!(args.get("sched_wakeup"), None);
    assert_eq!(args.get("gone"), None);
}

/// This machine's kernel: the prototypes montrace adapts to are found.
#[test]
fn live_tracepoint_arguments() {
    let Ok(btf) = Btf::from_file(Path::new(VMLINUX_BTF)) else {
        panic!(
            "{VMLINUX_BTF} is missing: this test needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
        );
    };
    let args = btf
        .tracepoint_args(&["sched_process_exit", "sched_switch", "sched_process_fork"])
        .unwrap();
    assert_eq!(args.get("sched_process_fork"), Some(&2), "{args:?}");
    assert!(
        matches!(args.get("sched_process_exit"), Some(1 | 2)),
        "{args:?}"
    );
    assert!(matches!(args.get("sched_switch"), Some(3 | 4)), "{args:?}");
}
