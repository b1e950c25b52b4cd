//! The kernel's FUSE structures, each declared once, `#[repr(C)]`, with its
//! size checked at compile time against `include/uapi/linux/fuse.h`
//! (protocol 7.45, Linux 6.18). Names follow the kernel's, without the
//! `fuse_` prefix, so either can be found from the other; constants keep the
//! kernel's names as they are.
//!
//! Every structure is padded to 8 bytes by the kernel itself, so none has
//! implicit padding and all derive zerocopy's byte conversions: requests are
//! read with `read_from_prefix` (no alignment needed), replies written with
//! `write_to_prefix`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The protocol version this crate speaks; the kernel and we use the
/// smaller of its minor and ours.
pub(crate) const FUSE_KERNEL_VERSION: u32 = 7;
pub(crate) const FUSE_KERNEL_MINOR_VERSION: u32 = 45;

/// The node id of the root directory.
pub(crate) const FUSE_ROOT_ID: u64 = 1;

/// Declares plain `#[repr(C)]` kernel structures with zerocopy's derives.
macro_rules! kernel_structs {
    ($($(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* })*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
            pub(crate) struct $name {
                $($(#[$fmeta])* pub $field: $ty,)*
            }
        )*
    };
}

kernel_structs! {
    /// `struct fuse_in_header`: opens every request.
    struct InHeader {
        /// Length of the whole request, this header included.
        len: u32,
        opcode: u32,
        /// The request's id, echoed in the reply (0 never comes from the kernel).
        unique: u64,
        nodeid: u64,
        uid: u32,
        gid: u32,
        pid: u32,
        /// Length of the extensions after the arguments, in 8-byte units.
        total_extlen: u16,
        padding: u16,
    }

    /// `struct fuse_out_header`: opens every reply and notification.
    struct OutHeader {
        /// Length of the whole reply, this header included.
        len: u32,
        /// 0 or a negative errno; for a notification (unique 0) its code.
        error: i32,
        unique: u64,
    }

    /// `struct fuse_attr`. Times are seconds since the epoch (as i64 bits)
    /// plus nanoseconds in 0..1e9; `mode` carries the file type bits.
    struct Attr {
        ino: u64,
        size: u64,
        blocks: u64,
        atime: u64,
        mtime: u64,
        ctime: u64,
        atimensec: u32,
        mtimensec: u32,
        ctimensec: u32,
        mode: u32,
        nlink: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        blksize: u32,
        /// FUSE_ATTR_* bits.
        flags: u32,
    }

    /// `struct fuse_entry_out`: a looked-up (or made) name. Node id 0 with
    /// a timeout is a cacheable "no such name".
    struct EntryOut {
        nodeid: u64,
        generation: u64,
        entry_valid: u64,
        attr_valid: u64,
        entry_valid_nsec: u32,
        attr_valid_nsec: u32,
        attr: Attr,
    }

    /// `struct fuse_attr_out`.
    struct AttrOut {
        attr_valid: u64,
        attr_valid_nsec: u32,
        dummy: u32,
        attr: Attr,
    }

    /// `struct fuse_getattr_in` (7.9+).
    struct GetattrIn {
        /// FUSE_GETATTR_FH: `fh` is valid.
        getattr_flags: u32,
        dummy: u32,
        fh: u64,
    }

    /// `struct fuse_setattr_in`: `valid` (FATTR_*) says which fields count.
    struct SetattrIn {
        valid: u32,
        padding: u32,
        fh: u64,
        size: u64,
        lock_owner: u64,
        atime: u64,
        mtime: u64,
        ctime: u64,
        atimensec: u32,
        mtimensec: u32,
        ctimensec: u32,
        mode: u32,
        unused4: u32,
        uid: u32,
        gid: u32,
        unused5: u32,
    }

    /// `struct fuse_open_in`, for OPEN and OPENDIR.
    struct OpenIn {
        /// open(2) flags.
        flags: u32,
        /// FUSE_OPEN_* bits.
        open_flags: u32,
    }

    /// `struct fuse_open_out`, also the second half of CREATE's reply.
    struct OpenOut {
        fh: u64,
        /// FOPEN_* bits.
        open_flags: u32,
        backing_id: i32,
    }

    /// `struct fuse_create_in` (7.12+; before, an [`OpenIn`]).
    struct CreateIn {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    }

    /// `struct fuse_mknod_in` (7.12+; before, only `mode` and `rdev`).
    struct MknodIn {
        mode: u32,
        rdev: u32,
        umask: u32,
        padding: u32,
    }

    /// `struct fuse_mkdir_in`.
    struct MkdirIn {
        mode: u32,
        umask: u32,
    }

    /// `struct fuse_rename_in`.
    struct RenameIn {
        newdir: u64,
    }

    /// `struct fuse_rename2_in`: RENAME_* flags of renameat2(2).
    struct Rename2In {
        newdir: u64,
        flags: u32,
        padding: u32,
    }

    /// `struct fuse_link_in`.
    struct LinkIn {
        oldnodeid: u64,
    }

    /// `struct fuse_read_in`, for READ, READDIR and READDIRPLUS (7.9+;
    /// before, the first 24 bytes).
    struct ReadIn {
        fh: u64,
        offset: u64,
        size: u32,
        read_flags: u32,
        lock_owner: u64,
        flags: u32,
        padding: u32,
    }

    /// `struct fuse_write_in` (7.9+; before, the first 24 bytes); the data
    /// follows it.
    struct WriteIn {
        fh: u64,
        offset: u64,
        size: u32,
        /// FUSE_WRITE_* bits.
        write_flags: u32,
        lock_owner: u64,
        flags: u32,
        padding: u32,
    }

    /// `struct fuse_write_out`.
    struct WriteOut {
        size: u32,
        padding: u32,
    }

    /// `struct fuse_release_in`, for RELEASE and RELEASEDIR.
    struct ReleaseIn {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    }

    /// `struct fuse_flush_in`.
    struct FlushIn {
        fh: u64,
        unused: u32,
        padding: u32,
        lock_owner: u64,
    }

    /// `struct fuse_fsync_in`, for FSYNC and FSYNCDIR.
    struct FsyncIn {
        fh: u64,
        /// FUSE_FSYNC_FDATASYNC.
        fsync_flags: u32,
        padding: u32,
    }

    /// `struct fuse_forget_in`.
    struct ForgetIn {
        nlookup: u64,
    }

    /// `struct fuse_forget_one`: one node of a BATCH_FORGET.
    struct ForgetOne {
        nodeid: u64,
        nlookup: u64,
    }

    /// `struct fuse_batch_forget_in`: `count` [`ForgetOne`]s follow.
    struct BatchForgetIn {
        count: u32,
        dummy: u32,
    }

    /// `struct fuse_init_in` as 7.36+ kernels send it (older ones send the
    /// first 16 bytes; `flags2` counts only with FUSE_INIT_EXT in `flags`).
    struct InitIn {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u32,
        flags2: u32,
        unused: [u32; 11],
    }

    /// `struct fuse_init_out` (7.43+ layout; a kernel before 7.23 reads
    /// only [`FUSE_COMPAT_22_INIT_OUT_SIZE`] bytes).
    struct InitOut {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u32,
        max_background: u16,
        congestion_threshold: u16,
        max_write: u32,
        time_gran: u32,
        max_pages: u16,
        map_alignment: u16,
        flags2: u32,
        max_stack_depth: u32,
        request_timeout: u16,
        unused: [u16; 11],
    }

    /// `struct fuse_kstatfs`, the whole of `struct fuse_statfs_out`.
    struct Kstatfs {
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
        padding: u32,
        spare: [u32; 6],
    }

    /// `struct fuse_getxattr_in`, for GETXATTR and LISTXATTR (the name
    /// follows for GETXATTR).
    struct GetxattrIn {
        size: u32,
        padding: u32,
    }

    /// `struct fuse_getxattr_out`: the size, when asked with size 0.
    struct GetxattrOut {
        size: u32,
        padding: u32,
    }

    /// `struct fuse_setxattr_in` with FUSE_SETXATTR_EXT; name and value
    /// follow.
    struct SetxattrIn {
        size: u32,
        flags: u32,
        /// FUSE_SETXATTR_ACL_KILL_SGID.
        setxattr_flags: u32,
        padding: u32,
    }

    /// `struct fuse_setxattr_in` without FUSE_SETXATTR_EXT
    /// (FUSE_COMPAT_SETXATTR_IN_SIZE).
    struct SetxattrInCompat {
        size: u32,
        flags: u32,
    }

    /// `struct fuse_access_in`.
    struct AccessIn {
        mask: u32,
        padding: u32,
    }

    /// `struct fuse_interrupt_in`: the request to interrupt.
    struct InterruptIn {
        unique: u64,
    }

    /// `struct fuse_ioctl_in`; `in_size` bytes of argument follow.
    struct IoctlIn {
        fh: u64,
        /// FUSE_IOCTL_* bits.
        flags: u32,
        cmd: u32,
        arg: u64,
        in_size: u32,
        out_size: u32,
    }

    /// `struct fuse_ioctl_out`; the output bytes follow.
    struct IoctlOut {
        result: i32,
        flags: u32,
        in_iovs: u32,
        out_iovs: u32,
    }

    /// `struct fuse_fallocate_in`: `mode` as fallocate(2)'s.
    struct FallocateIn {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
        padding: u32,
    }

    /// `struct fuse_lseek_in`.
    struct LseekIn {
        fh: u64,
        offset: u64,
        whence: u32,
        padding: u32,
    }

    /// `struct fuse_lseek_out`.
    struct LseekOut {
        offset: u64,
    }

    /// `struct fuse_dirent` without its name: `namelen` bytes of name
    /// follow, then zeros to the next 8-byte boundary.
    struct Dirent {
        ino: u64,
        /// Where the next listing starts to get the entries after this one.
        off: u64,
        namelen: u32,
        /// The DT_* type: the file type bits of the mode, shifted down 12.
        typ: u32,
    }

    /// `struct fuse_direntplus` without the name: READDIRPLUS's entries,
    /// each counted as a lookup unless its node id is 0.
    struct DirentPlus {
        entry_out: EntryOut,
        dirent: Dirent,
    }

    /// `struct fuse_notify_inval_inode_out`: drop cached attributes and
    /// the pages in `off..off + len` (`len` <= 0: to the end); `off` < 0
    /// drops only the attributes.
    struct NotifyInvalInodeOut {
        ino: u64,
        off: i64,
        len: i64,
    }

    /// `struct fuse_notify_inval_entry_out`: the name (`namelen` bytes and
    /// a NUL) follows.
    struct NotifyInvalEntryOut {
        parent: u64,
        namelen: u32,
        /// FUSE_EXPIRE_ONLY.
        flags: u32,
    }

    /// `struct fuse_notify_delete_out`: the name (and a NUL) follows.
    struct NotifyDeleteOut {
        parent: u64,
        child: u64,
        namelen: u32,
        padding: u32,
    }
}

const _: () = {
    assert!(size_of::<InHeader>() == 40);
    assert!(size_of::<OutHeader>() == 16);
    assert!(size_of::<Attr>() == 88);
    assert!(size_of::<EntryOut>() == 128);
    assert!(size_of::<AttrOut>() == 104);
    assert!(size_of::<GetattrIn>() == 16);
    assert!(size_of::<SetattrIn>() == 88);
    assert!(size_of::<OpenIn>() == 8);
    assert!(size_of::<OpenOut>() == 16);
    assert!(size_of::<CreateIn>() == 16);
    assert!(size_of::<MknodIn>() == 16);
    assert!(size_of::<MkdirIn>() == 8);
    assert!(size_of::<RenameIn>() == 8);
    assert!(size_of::<Rename2In>() == 16);
    assert!(size_of::<LinkIn>() == 8);
    assert!(size_of::<ReadIn>() == 40);
    assert!(size_of::<WriteIn>() == 40);
    assert!(size_of::<WriteOut>() == 8);
    assert!(size_of::<ReleaseIn>() == 24);
    assert!(size_of::<FlushIn>() == 24);
    assert!(size_of::<FsyncIn>() == 16);
    assert!(size_of::<ForgetIn>() == 8);
    assert!(size_of::<ForgetOne>() == 16);
    assert!(size_of::<BatchForgetIn>() == 8);
    assert!(size_of::<InitIn>() == 64);
    assert!(size_of::<InitOut>() == 64);
    assert!(size_of::<Kstatfs>() == 80);
    assert!(size_of::<GetxattrIn>() == 8);
    assert!(size_of::<GetxattrOut>() == 8);
    assert!(size_of::<SetxattrIn>() == 16);
    assert!(size_of::<SetxattrInCompat>() == FUSE_COMPAT_SETXATTR_IN_SIZE);
    assert!(size_of::<AccessIn>() == 8);
    assert!(size_of::<InterruptIn>() == 8);
    assert!(size_of::<IoctlIn>() == 32);
    assert!(size_of::<IoctlOut>() == 16);
    assert!(size_of::<FallocateIn>() == 32);
    assert!(size_of::<LseekIn>() == 24);
    assert!(size_of::<LseekOut>() == 8);
    assert!(size_of::<Dirent>() == FUSE_NAME_OFFSET);
    assert!(size_of::<DirentPlus>() == 152);
    assert!(size_of::<NotifyInvalInodeOut>() == 24);
    assert!(size_of::<NotifyInvalEntryOut>() == 16);
    assert!(size_of::<NotifyDeleteOut>() == 24);
    // The fields a reply's meaning hangs on sit where the kernel reads them.
    assert!(std::mem::offset_of!(EntryOut, attr) == 40);
    assert!(std::mem::offset_of!(AttrOut, attr) == 16);
    assert!(std::mem::offset_of!(InitOut, flags2) == 32);
    assert!(std::mem::offset_of!(InitOut, max_stack_depth) == 36);
    assert!(std::mem::offset_of!(InitIn, flags2) == 16);
    assert!(std::mem::offset_of!(SetattrIn, mode) == 68);
};

/// Size of the older, shorter forms the kernel sends or reads for an
/// older negotiated minor version.
pub(crate) const FUSE_COMPAT_MKNOD_IN_SIZE: usize = 8;
pub(crate) const FUSE_COMPAT_WRITE_IN_SIZE: usize = 24;
pub(crate) const FUSE_COMPAT_SETXATTR_IN_SIZE: usize = 8;
pub(crate) const FUSE_COMPAT_INIT_OUT_SIZE: usize = 8;
pub(crate) const FUSE_COMPAT_22_INIT_OUT_SIZE: usize = 24;
pub(crate) const FUSE_COMPAT_INIT_IN_SIZE: usize = 16;
/// Where a dirent's name starts.
pub(crate) const FUSE_NAME_OFFSET: usize = 24;

/// Rounds a directory record up to the 8-byte boundary the kernel expects
/// between records (`FUSE_REC_ALIGN`).
pub(crate) const fn rec_align(len: usize) -> usize {
    (len + 7) & !7
}

// Operations (`enum fuse_opcode`).
pub(crate) const FUSE_LOOKUP: u32 = 1;
pub(crate) const FUSE_FORGET: u32 = 2;
pub(crate) const FUSE_GETATTR: u32 = 3;
pub(crate) const FUSE_SETATTR: u32 = 4;
pub(crate) const FUSE_READLINK: u32 = 5;
pub(crate) const FUSE_SYMLINK: u32 = 6;
pub(crate) const FUSE_MKNOD: u32 = 8;
pub(crate) const FUSE_MKDIR: u32 = 9;
pub(crate) const FUSE_UNLINK: u32 = 10;
pub(crate) const FUSE_RMDIR: u32 = 11;
pub(crate) const FUSE_RENAME: u32 = 12;
pub(crate) const FUSE_LINK: u32 = 13;
pub(crate) const FUSE_OPEN: u32 = 14;
pub(crate) const FUSE_READ: u32 = 15;
pub(crate) const FUSE_WRITE: u32 = 16;
pub(crate) const FUSE_STATFS: u32 = 17;
pub(crate) const FUSE_RELEASE: u32 = 18;
pub(crate) const FUSE_FSYNC: u32 = 20;
pub(crate) const FUSE_SETXATTR: u32 = 21;
pub(crate) const FUSE_GETXATTR: u32 = 22;
pub(crate) const FUSE_LISTXATTR: u32 = 23;
pub(crate) const FUSE_REMOVEXATTR: u32 = 24;
pub(crate) const FUSE_FLUSH: u32 = 25;
pub(crate) const FUSE_INIT: u32 = 26;
pub(crate) const FUSE_OPENDIR: u32 = 27;
pub(crate) const FUSE_READDIR: u32 = 28;
pub(crate) const FUSE_RELEASEDIR: u32 = 29;
pub(crate) const FUSE_FSYNCDIR: u32 = 30;
pub(crate) const FUSE_GETLK: u32 = 31;
pub(crate) const FUSE_SETLK: u32 = 32;
pub(crate) const FUSE_SETLKW: u32 = 33;
pub(crate) const FUSE_ACCESS: u32 = 34;
pub(crate) const FUSE_CREATE: u32 = 35;
pub(crate) const FUSE_INTERRUPT: u32 = 36;
pub(crate) const FUSE_BMAP: u32 = 37;
pub(crate) const FUSE_DESTROY: u32 = 38;
pub(crate) const FUSE_IOCTL: u32 = 39;
pub(crate) const FUSE_POLL: u32 = 40;
pub(crate) const FUSE_NOTIFY_REPLY: u32 = 41;
pub(crate) const FUSE_BATCH_FORGET: u32 = 42;
pub(crate) const FUSE_FALLOCATE: u32 = 43;
pub(crate) const FUSE_READDIRPLUS: u32 = 44;
pub(crate) const FUSE_RENAME2: u32 = 45;
pub(crate) const FUSE_LSEEK: u32 = 46;
pub(crate) const FUSE_COPY_FILE_RANGE: u32 = 47;
pub(crate) const FUSE_SETUPMAPPING: u32 = 48;
pub(crate) const FUSE_REMOVEMAPPING: u32 = 49;
pub(crate) const FUSE_SYNCFS: u32 = 50;
pub(crate) const FUSE_TMPFILE: u32 = 51;
pub(crate) const FUSE_STATX: u32 = 52;
pub(crate) const FUSE_COPY_FILE_RANGE_64: u32 = 53;

// Notification codes (`enum fuse_notify_code`), sent in
// `OutHeader::error` with unique 0.
pub(crate) const FUSE_NOTIFY_POLL: i32 = 1;
pub(crate) const FUSE_NOTIFY_INVAL_INODE: i32 = 2;
pub(crate) const FUSE_NOTIFY_INVAL_ENTRY: i32 = 3;
pub(crate) const FUSE_NOTIFY_STORE: i32 = 4;
pub(crate) const FUSE_NOTIFY_RETRIEVE: i32 = 5;
pub(crate) const FUSE_NOTIFY_DELETE: i32 = 6;
pub(crate) const FUSE_NOTIFY_RESEND: i32 = 7;
pub(crate) const FUSE_NOTIFY_INC_EPOCH: i32 = 8;
pub(crate) const FUSE_NOTIFY_PRUNE: i32 = 9;

// INIT flags, as one u64: the low half travels in `flags`, the high half
// in `flags2` (which counts only with FUSE_INIT_EXT).
pub(crate) const FUSE_ASYNC_READ: u64 = 1 << 0;
pub(crate) const FUSE_POSIX_LOCKS: u64 = 1 << 1;
pub(crate) const FUSE_FILE_OPS: u64 = 1 << 2;
pub(crate) const FUSE_ATOMIC_O_TRUNC: u64 = 1 << 3;
pub(crate) const FUSE_EXPORT_SUPPORT: u64 = 1 << 4;
pub(crate) const FUSE_BIG_WRITES: u64 = 1 << 5;
pub(crate) const FUSE_DONT_MASK: u64 = 1 << 6;
pub(crate) const FUSE_SPLICE_WRITE: u64 = 1 << 7;
pub(crate) const FUSE_SPLICE_MOVE: u64 = 1 << 8;
pub(crate) const FUSE_SPLICE_READ: u64 = 1 << 9;
pub(crate) const FUSE_FLOCK_LOCKS: u64 = 1 << 10;
pub(crate) const FUSE_HAS_IOCTL_DIR: u64 = 1 << 11;
pub(crate) const FUSE_AUTO_INVAL_DATA: u64 = 1 << 12;
pub(crate) const FUSE_DO_READDIRPLUS: u64 = 1 << 13;
pub(crate) const FUSE_READDIRPLUS_AUTO: u64 = 1 << 14;
pub(crate) const FUSE_ASYNC_DIO: u64 = 1 << 15;
pub(crate) const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;
pub(crate) const FUSE_NO_OPEN_SUPPORT: u64 = 1 << 17;
pub(crate) const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
pub(crate) const FUSE_HANDLE_KILLPRIV: u64 = 1 << 19;
pub(crate) const FUSE_POSIX_ACL: u64 = 1 << 20;
pub(crate) const FUSE_ABORT_ERROR: u64 = 1 << 21;
pub(crate) const FUSE_MAX_PAGES: u64 = 1 << 22;
pub(crate) const FUSE_CACHE_SYMLINKS: u64 = 1 << 23;
pub(crate) const FUSE_NO_OPENDIR_SUPPORT: u64 = 1 << 24;
pub(crate) const FUSE_EXPLICIT_INVAL_DATA: u64 = 1 << 25;
pub(crate) const FUSE_MAP_ALIGNMENT: u64 = 1 << 26;
pub(crate) const FUSE_SUBMOUNTS: u64 = 1 << 27;
pub(crate) const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
pub(crate) const FUSE_SETXATTR_EXT: u64 = 1 << 29;
pub(crate) const FUSE_INIT_EXT: u64 = 1 << 30;
pub(crate) const FUSE_INIT_RESERVED: u64 = 1 << 31;
pub(crate) const FUSE_SECURITY_CTX: u64 = 1 << 32;
pub(crate) const FUSE_HAS_INODE_DAX: u64 = 1 << 33;
pub(crate) const FUSE_CREATE_SUPP_GROUP: u64 = 1 << 34;
pub(crate) const FUSE_HAS_EXPIRE_ONLY: u64 = 1 << 35;
pub(crate) const FUSE_DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
pub(crate) const FUSE_PASSTHROUGH: u64 = 1 << 37;
pub(crate) const FUSE_NO_EXPORT_SUPPORT: u64 = 1 << 38;
pub(crate) const FUSE_HAS_RESEND: u64 = 1 << 39;
pub(crate) const FUSE_ALLOW_IDMAP: u64 = 1 << 40;
pub(crate) const FUSE_OVER_IO_URING: u64 = 1 << 41;
pub(crate) const FUSE_REQUEST_TIMEOUT: u64 = 1 << 42;

// FOPEN_* bits of `OpenOut::open_flags`.
pub(crate) const FOPEN_DIRECT_IO: u32 = 1 << 0;
pub(crate) const FOPEN_KEEP_CACHE: u32 = 1 << 1;
pub(crate) const FOPEN_NONSEEKABLE: u32 = 1 << 2;
pub(crate) const FOPEN_CACHE_DIR: u32 = 1 << 3;
pub(crate) const FOPEN_STREAM: u32 = 1 << 4;
pub(crate) const FOPEN_NOFLUSH: u32 = 1 << 5;
pub(crate) const FOPEN_PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
pub(crate) const FOPEN_PASSTHROUGH: u32 = 1 << 7;

// FATTR_* bits of `SetattrIn::valid`.
pub(crate) const FATTR_MODE: u32 = 1 << 0;
pub(crate) const FATTR_UID: u32 = 1 << 1;
pub(crate) const FATTR_GID: u32 = 1 << 2;
pub(crate) const FATTR_SIZE: u32 = 1 << 3;
pub(crate) const FATTR_ATIME: u32 = 1 << 4;
pub(crate) const FATTR_MTIME: u32 = 1 << 5;
pub(crate) const FATTR_FH: u32 = 1 << 6;
pub(crate) const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(crate) const FATTR_MTIME_NOW: u32 = 1 << 8;
pub(crate) const FATTR_LOCKOWNER: u32 = 1 << 9;
pub(crate) const FATTR_CTIME: u32 = 1 << 10;
/// With FUSE_HANDLE_KILLPRIV_V2: the daemon clears set-user-ID (and
/// set-group-ID if group-executable) along with this change.
pub(crate) const FATTR_KILL_SUIDGID: u32 = 1 << 11;

/// `GetattrIn::getattr_flags`: the request names an open file.
pub(crate) const FUSE_GETATTR_FH: u32 = 1 << 0;

// `WriteIn::write_flags`.
pub(crate) const FUSE_WRITE_CACHE: u32 = 1 << 0;
pub(crate) const FUSE_WRITE_LOCKOWNER: u32 = 1 << 1;
/// With FUSE_HANDLE_KILLPRIV_V2: the writer lacks CAP_FSETID, so the
/// daemon clears set-user-ID and set-group-ID as the write lands.
pub(crate) const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// `ReadIn::read_flags`: `lock_owner` is valid.
pub(crate) const FUSE_READ_LOCKOWNER: u32 = 1 << 1;

// `ReleaseIn::release_flags`.
pub(crate) const FUSE_RELEASE_FLUSH: u32 = 1 << 0;
pub(crate) const FUSE_RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;

/// `FsyncIn::fsync_flags`: only the data need be durable.
pub(crate) const FUSE_FSYNC_FDATASYNC: u32 = 1 << 0;

/// `OpenIn::open_flags` and `CreateIn::open_flags` (with
/// FUSE_HANDLE_KILLPRIV_V2): an O_TRUNC open by a caller without
/// CAP_FSETID, so set-user-ID and set-group-ID go.
pub(crate) const FUSE_OPEN_KILL_SUIDGID: u32 = 1 << 0;

/// `SetxattrIn::setxattr_flags`: setting the access ACL clears
/// set-group-ID (the kernel decided the caller may not keep it).
pub(crate) const FUSE_SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;

// `IoctlIn::flags`.
pub(crate) const FUSE_IOCTL_COMPAT: u32 = 1 << 0;
pub(crate) const FUSE_IOCTL_UNRESTRICTED: u32 = 1 << 1;
pub(crate) const FUSE_IOCTL_RETRY: u32 = 1 << 2;
pub(crate) const FUSE_IOCTL_32BIT: u32 = 1 << 3;
pub(crate) const FUSE_IOCTL_DIR: u32 = 1 << 4;
pub(crate) const FUSE_IOCTL_COMPAT_X32: u32 = 1 << 5;

/// `NotifyInvalEntryOut::flags`: let the entry time out instead of
/// dropping it (needs FUSE_HAS_EXPIRE_ONLY).
pub(crate) const FUSE_EXPIRE_ONLY: u32 = 1 << 0;

// `Attr::flags`.
pub(crate) const FUSE_ATTR_SUBMOUNT: u32 = 1 << 0;
pub(crate) const FUSE_ATTR_DAX: u32 = 1 << 1;

/// The high bit of `InHeader::unique` marks a request the kernel resends
/// (FUSE_HAS_RESEND).
pub(crate) const FUSE_UNIQUE_RESEND: u64 = 1 << 63;
