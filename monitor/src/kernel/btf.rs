//! A minimal reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`), just enough to compute the
//! struct field offsets the eBPF programs need.
//!
//! aya-ebpf has no CO-RE relocations, so the programs cannot ask the loader to patch field
//! offsets; instead the agent looks them up here and writes them into the programs' read-only
//! `OFFSETS` global before load. Format reference: the kernel's `Documentation/bpf/btf.rst`.
//!
//! Only native little-endian BTF is accepted (the BTF we read always comes from the running
//! kernel, and montrace only targets little-endian machines). Every read is bounds-checked:
//! malformed input gives [`BtfError::Malformed`], never a panic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use monitor_common::Offsets;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read kernel BTF at {path}: {source}. montrace needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed BTF: {0}")]
    Malformed(String),
    /// What is missing, e.g. "struct task_struct", "field task_struct.se.sum_exec_runtime",
    /// "enumerator MM_ANONPAGES".
    #[error("kernel BTF has no {0}")]
    Missing(String),
}

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: usize = 24;
/// `struct btf_type`: name_off, info, size/type.
const TYPE_LEN: usize = 12;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Bounds recursion and modifier chains so that cyclic (malformed) type graphs end in an error
/// instead of a hang or a stack overflow. Real kernels nest a few levels at most.
const MAX_DEPTH: u32 = 64;

fn malformed(msg: impl Into<String>) -> BtfError {
    BtfError::Malformed(msg.into())
}

/// Parsed kernel BTF: the raw bytes plus an index of where each type's record starts.
pub struct Btf {
    data: Vec<u8>,
    /// Absolute byte range of the string section within `data`.
    str_start: usize,
    str_end: usize,
    /// `types[id - 1]` is the absolute offset of type `id`'s record (id 0 is `void`).
    types: Vec<usize>,
    /// Name -> id of the first complete struct with that name, and likewise for unions (only
    /// consulted when no struct matches: a few kernel types are unions at top level).
    structs: HashMap<Box<str>, u32>,
    unions: HashMap<Box<str>, u32>,
}

impl std::fmt::Debug for Btf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Btf")
            .field("bytes", &self.data.len())
            .field("types", &self.types.len())
            .field("structs", &self.structs.len())
            .field("unions", &self.unions.len())
            .finish()
    }
}

/// One decoded `struct btf_type` header; `extra` is where its kind-specific data starts.
#[derive(Clone, Copy, Debug)]
struct TypeRec {
    name_off: u32,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    /// `size` for INT/STRUCT/UNION/ENUM/ENUM64/FLOAT/DATASEC, `type` for the others.
    size_or_type: u32,
    extra: usize,
}

/// A member found inside a struct/union, its offset already made relative to the outermost
/// struct searched (anonymous wrappers folded in).
#[derive(Clone, Copy, Debug)]
struct Member {
    bit_offset: u64,
    type_id: u32,
    bitfield_size: u32,
}

fn read_u16(data: &[u8], off: usize) -> Option<u16> {
    let b = data.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn read_u32(data: &[u8], off: usize) -> Option<u32> {
    let b = data.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Bytes of kind-specific data that follow a `struct btf_type` of this kind.
fn trailing_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
        | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

impl Btf {
    /// Parses a BTF blob (copied; the returned `Btf` does not borrow `data`).
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        Self::parse_owned(data.to_vec())
    }

    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_owned(data)
    }

    fn parse_owned(data: Vec<u8>) -> Result<Btf, BtfError> {
        let magic = read_u16(&data, 0).ok_or_else(|| malformed("shorter than its header"))?;
        if magic == MAGIC.swap_bytes() {
            return Err(malformed("big-endian BTF is not supported"));
        }
        if magic != MAGIC {
            return Err(malformed(format!(
                "bad magic {magic:#06x} (expected {MAGIC:#06x})"
            )));
        }
        if data.len() < HEADER_LEN {
            return Err(malformed("shorter than its header"));
        }
        let version = data[2];
        if version != 1 {
            return Err(malformed(format!("unsupported version {version}")));
        }
        // Fields are at fixed places within the HEADER_LEN bytes checked above, but reading
        // through read_u32 keeps every access checked in one way.
        let field = |off: usize| {
            read_u32(&data, off)
                .map(|v| v as usize)
                .ok_or_else(|| malformed("shorter than its header"))
        };
        let hdr_len = field(4)?;
        let (type_off, type_len) = (field(8)?, field(12)?);
        let (str_off, str_len) = (field(16)?, field(20)?);
        if hdr_len < HEADER_LEN {
            return Err(malformed(format!("header length {hdr_len} < {HEADER_LEN}")));
        }
        let section = |name: &str, off: usize, len: usize| {
            let start = hdr_len.checked_add(off);
            let end = start.and_then(|s| s.checked_add(len));
            match (start, end) {
                (Some(s), Some(e)) if e <= data.len() => Ok((s, e)),
                _ => Err(malformed(format!(
                    "{name} section ({off}+{len} after a {hdr_len}-byte header) runs past the end of the data ({} bytes)",
                    data.len()
                ))),
            }
        };
        let (type_start, type_end) = section("type", type_off, type_len)?;
        let (str_start, str_end) = section("string", str_off, str_len)?;
        // Offset 0 must be the empty string: anonymous types and members use name_off 0.
        if str_len == 0 || data[str_start] != 0 {
            return Err(malformed(
                "string section does not start with an empty string",
            ));
        }

        let mut btf = Btf {
            data,
            str_start,
            str_end,
            // vmlinux averages ~37 bytes per type; reserving avoids regrowing a 150k-entry Vec.
            types: Vec::with_capacity(type_len / 32),
            structs: HashMap::new(),
            unions: HashMap::new(),
        };
        let mut off = type_start;
        while off < type_end {
            let id = u32::try_from(btf.types.len() + 1)
                .map_err(|_| malformed("more types than fit a 32-bit id"))?;
            let rec = btf.decode(off, type_end)?;
            let extra_len = trailing_len(rec.kind, rec.vlen as usize)
                .ok_or_else(|| malformed(format!("type {id} has unknown kind {}", rec.kind)))?;
            let next = rec
                .extra
                .checked_add(extra_len)
                .filter(|&n| n <= type_end)
                .ok_or_else(|| {
                    malformed(format!("type {id} runs past the end of the type section"))
                })?;
            btf.types.push(off);

            let index = match rec.kind {
                KIND_STRUCT => Some(&mut btf.structs),
                KIND_UNION => Some(&mut btf.unions),
                _ => None,
            };
            // A FWD or an empty/zero-sized declaration can precede the complete definition;
            // only complete types are worth indexing.
            if let Some(index) = index {
                if rec.name_off != 0 && rec.vlen > 0 && rec.size_or_type > 0 {
                    let name = str_at(&btf.data, btf.str_start, btf.str_end, rec.name_off)?;
                    let name = std::str::from_utf8(name)
                        .map_err(|_| malformed(format!("type {id} has a non-UTF-8 name")))?;
                    if !index.contains_key(name) {
                        index.insert(name.into(), id);
                    }
                }
            }
            off = next;
        }
        Ok(btf)
    }

    /// Decodes the fixed part of the type record at `off`, which must end by `limit`.
    fn decode(&self, off: usize, limit: usize) -> Result<TypeRec, BtfError> {
        let end = off.checked_add(TYPE_LEN).filter(|&e| e <= limit);
        let (Some(extra), Some(name_off), Some(info), Some(size_or_type)) = (
            end,
            read_u32(&self.data, off),
            read_u32(&self.data, off + 4),
            read_u32(&self.data, off + 8),
        ) else {
            return Err(malformed(format!("truncated type record at byte {off}")));
        };
        Ok(TypeRec {
            name_off,
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kind_flag: info >> 31 != 0,
            size_or_type,
            extra,
        })
    }

    /// The record of type `id`; `void` (0) and ids past the last type are errors because every
    /// caller needs a real type.
    fn record(&self, id: u32) -> Result<TypeRec, BtfError> {
        let off = (id as usize)
            .checked_sub(1)
            .and_then(|i| self.types.get(i))
            .ok_or_else(|| {
                if id == 0 {
                    malformed("reference to void where a type was expected")
                } else {
                    malformed(format!("reference to type {id}, past the last type"))
                }
            })?;
        // Records were bounds-checked against the type section while indexing.
        self.decode(*off, self.data.len())
    }

    fn u32_at(&self, off: usize) -> Result<u32, BtfError> {
        read_u32(&self.data, off)
            .ok_or_else(|| malformed(format!("read past the end at byte {off}")))
    }

    fn name(&self, name_off: u32) -> Result<&[u8], BtfError> {
        str_at(&self.data, self.str_start, self.str_end, name_off)
    }

    /// Follows typedefs and qualifiers down to the type they name.
    fn resolve(&self, mut id: u32) -> Result<(u32, TypeRec), BtfError> {
        for _ in 0..MAX_DEPTH {
            let rec = self.record(id)?;
            match rec.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = rec.size_or_type;
                }
                _ => return Ok((id, rec)),
            }
        }
        Err(malformed(format!(
            "typedef/qualifier chain through type {id} is too long (a cycle?)"
        )))
    }

    fn find_struct(&self, name: &str) -> Result<u32, BtfError> {
        self.structs
            .get(name)
            .or_else(|| self.unions.get(name))
            .copied()
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))
    }

    /// Finds member `name` in the struct/union `rec`, descending into anonymous struct/union
    /// members in declaration order, as C name lookup does.
    fn find_member(
        &self,
        rec: &TypeRec,
        name: &[u8],
        depth: u32,
    ) -> Result<Option<Member>, BtfError> {
        if depth >= MAX_DEPTH {
            return Err(malformed("anonymous members nest too deeply (a cycle?)"));
        }
        for i in 0..rec.vlen as usize {
            let m = rec.extra + i * 12;
            let (m_name, m_type, m_off) =
                (self.u32_at(m)?, self.u32_at(m + 4)?, self.u32_at(m + 8)?);
            // With kind_flag set the offset word also carries the bitfield width.
            let (bit_offset, bitfield_size) = if rec.kind_flag {
                (m_off & 0x00ff_ffff, m_off >> 24)
            } else {
                (m_off, 0)
            };
            if m_name == 0 {
                // Unnamed members are anonymous structs/unions, or unnamed padding bitfields,
                // which cannot hold a named member.
                let (_, inner) = self.resolve(m_type)?;
                if matches!(inner.kind, KIND_STRUCT | KIND_UNION) {
                    if let Some(found) = self.find_member(&inner, name, depth + 1)? {
                        return Ok(Some(Member {
                            bit_offset: found.bit_offset + u64::from(bit_offset),
                            ..found
                        }));
                    }
                }
            } else if self.name(m_name)? == name {
                return Ok(Some(Member {
                    bit_offset: u64::from(bit_offset),
                    type_id: m_type,
                    bitfield_size,
                }));
            }
        }
        Ok(None)
    }

    /// Whether a member is a bitfield in a struct without kind_flag, where the width lives in the
    /// member's INT type encoding instead of the member's offset word.
    fn is_int_bitfield(&self, type_id: u32) -> Result<bool, BtfError> {
        let (_, rec) = self.resolve(type_id)?;
        if rec.kind != KIND_INT {
            return Ok(false);
        }
        let encoding = self.u32_at(rec.extra)?;
        let (bits, offset) = (encoding & 0xff, (encoding >> 16) & 0xff);
        Ok(offset != 0 || u64::from(bits) != u64::from(rec.size_or_type) * 8)
    }

    /// Byte offset of a (possibly nested, dot-separated) member inside a struct/union:
    /// `member_offset("task_struct", "se.sum_exec_runtime")`. Members of anonymous struct/union
    /// members are searched transparently (mm_struct wraps nearly all its fields in an anonymous
    /// struct). Typedefs, const/volatile/type_tag are resolved when descending. Bitfield members
    /// are an error (Malformed). Pointers are not followed.
    pub fn member_offset(&self, struct_name: &str, path: &str) -> Result<u32, BtfError> {
        let mut type_id = self.find_struct(struct_name)?;
        let mut bits: u64 = 0;
        let mut walked = String::from(struct_name);
        for component in path.split('.') {
            let (_, rec) = self.resolve(type_id)?;
            if !matches!(rec.kind, KIND_STRUCT | KIND_UNION) {
                return Err(malformed(format!(
                    "{walked} is not a struct or union (BTF kind {}), cannot look up .{component} in it",
                    rec.kind
                )));
            }
            walked.push('.');
            walked.push_str(component);
            let member = self
                .find_member(&rec, component.as_bytes(), 0)?
                .ok_or_else(|| BtfError::Missing(format!("field {struct_name}.{path}")))?;
            if member.bitfield_size != 0
                || member.bit_offset % 8 != 0
                || (!rec.kind_flag && self.is_int_bitfield(member.type_id)?)
            {
                return Err(malformed(format!(
                    "{walked} is a bitfield, it has no byte offset"
                )));
            }
            bits += member.bit_offset;
            type_id = member.type_id;
        }
        u32::try_from(bits / 8).map_err(|_| {
            malformed(format!(
                "offset of {struct_name}.{path} does not fit 32 bits"
            ))
        })
    }

    /// Size in bytes of a named struct (e.g. "percpu_counter").
    pub fn struct_size(&self, struct_name: &str) -> Result<u32, BtfError> {
        let id = self.find_struct(struct_name)?;
        Ok(self.record(id)?.size_or_type)
    }

    /// Value of a named enumerator in any ENUM/ENUM64 (e.g. "MM_ANONPAGES"); the first match
    /// wins. An unsigned 64-bit value above `i64::MAX` comes back as its two's-complement bits.
    pub fn enumerator(&self, name: &str) -> Result<i64, BtfError> {
        // Only a handful of lookups happen per run, so a scan beats building an index of every
        // enumerator in the kernel.
        for id in 1..=self.types.len() as u32 {
            let rec = self.record(id)?;
            let stride = match rec.kind {
                KIND_ENUM => 8,
                KIND_ENUM64 => 12,
                _ => continue,
            };
            for i in 0..rec.vlen as usize {
                let e = rec.extra + i * stride;
                if self.name(self.u32_at(e)?)? != name.as_bytes() {
                    continue;
                }
                let lo = self.u32_at(e + 4)?;
                // kind_flag marks a signed enum; older kernels leave it 0 for everything, but the
                // values we need are small and non-negative, so both readings agree on them.
                return Ok(if rec.kind == KIND_ENUM {
                    if rec.kind_flag {
                        i64::from(lo as i32)
                    } else {
                        i64::from(lo)
                    }
                } else {
                    let hi = self.u32_at(e + 8)?;
                    ((u64::from(hi) << 32) | u64::from(lo)) as i64
                });
            }
        }
        Err(BtfError::Missing(format!("enumerator {name}")))
    }
}

/// The NUL-terminated string at `name_off` in the string section `[start, end)` of `data`.
fn str_at(data: &[u8], start: usize, end: usize, name_off: u32) -> Result<&[u8], BtfError> {
    let section = data.get(start..end).unwrap_or_default();
    let rest = section
        .get(name_off as usize..)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            malformed(format!(
                "string offset {name_off} is past the string section"
            ))
        })?;
    let len = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed(format!("string at offset {name_off} is not NUL-terminated")))?;
    Ok(&rest[..len])
}

/// Fill every field of [`monitor_common::Offsets`] from the kernel's BTF, and set `ready = 1`.
pub fn kernel_offsets(btf: &Btf) -> Result<Offsets, BtfError> {
    let task = |path: &str| btf.member_offset("task_struct", path);
    let signal = |path: &str| btf.member_offset("signal_struct", path);
    let ioac = |path: &str| btf.member_offset("task_io_accounting", path);
    let mm = |path: &str| btf.member_offset("mm_struct", path);
    // The programs use these as array indexes, so they must be small non-negative numbers.
    let index = |name: &str| {
        let value = btf.enumerator(name)?;
        u32::try_from(value)
            .map_err(|_| malformed(format!("enumerator {name} = {value} is not a valid index")))
    };
    Ok(Offsets {
        ready: 1,
        task_pid: task("pid")?,
        task_tgid: task("tgid")?,
        task_start_boottime: task("start_boottime")?,
        task_comm: task("comm")?,
        task_exit_code: task("exit_code")?,
        task_utime: task("utime")?,
        task_stime: task("stime")?,
        task_sum_exec_runtime: task("se.sum_exec_runtime")?,
        task_min_flt: task("min_flt")?,
        task_maj_flt: task("maj_flt")?,
        task_nvcsw: task("nvcsw")?,
        task_nivcsw: task("nivcsw")?,
        task_ioac: task("ioac")?,
        task_signal: task("signal")?,
        task_mm: task("mm")?,
        task_real_parent: task("real_parent")?,
        signal_utime: signal("utime")?,
        signal_stime: signal("stime")?,
        signal_sum_sched_runtime: signal("sum_sched_runtime")?,
        signal_min_flt: signal("min_flt")?,
        signal_maj_flt: signal("maj_flt")?,
        signal_nvcsw: signal("nvcsw")?,
        signal_nivcsw: signal("nivcsw")?,
        signal_ioac: signal("ioac")?,
        ioac_rchar: ioac("rchar")?,
        ioac_wchar: ioac("wchar")?,
        ioac_read_bytes: ioac("read_bytes")?,
        ioac_write_bytes: ioac("write_bytes")?,
        mm_hiwater_rss: mm("hiwater_rss")?,
        mm_rss_stat: mm("rss_stat")?,
        percpu_counter_size: btf.struct_size("percpu_counter")?,
        percpu_counter_count: btf.member_offset("percpu_counter", "count")?,
        mm_arg_start: mm("arg_start")?,
        mm_arg_end: mm("arg_end")?,
        bprm_filename: btf.member_offset("linux_binprm", "filename")?,
        task_state: btf.member_offset("task_struct", "__state")?,
        // Set by `ebpf::Probes::load` from the ring buffer's size.
        wakeup_bytes: 0,
        signal_live: signal("live")?,
        task_children: task("children")?,
        task_sibling: task("sibling")?,
        // Classic tracepoint records start with their `struct trace_entry`, so offsets inside
        // the raw struct are offsets inside the record the program sees.
        tp_fork_child_pid: btf.member_offset("trace_event_raw_sched_process_fork", "child_pid")?,
        tp_exec_filename_loc: btf
            .member_offset("trace_event_raw_sched_process_exec", "__data_loc_filename")?,
        tp_exec_old_pid: btf.member_offset("trace_event_raw_sched_process_exec", "old_pid")?,
        mm_filepages: index("MM_FILEPAGES")?,
        mm_anonpages: index("MM_ANONPAGES")?,
        mm_shmempages: index("MM_SHMEMPAGES")?,
    })
}

#[cfg(test)]
mod tests {
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
        assert!(
            matches!(btf.enumerator("NOPE"), Err(BtfError::Missing(m)) if m == "enumerator NOPE")
        );
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
}
