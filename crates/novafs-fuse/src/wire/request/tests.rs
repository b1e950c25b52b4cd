use zerocopy::IntoBytes;

use super::*;

const EXT: Negotiated = Negotiated {
    minor: FUSE_KERNEL_MINOR_VERSION,
    setxattr_ext: true,
};

fn header(opcode: u32, args_len: usize) -> InHeader {
    InHeader {
        len: (size_of::<InHeader>() + args_len) as u32,
        opcode,
        unique: 77,
        nodeid: 5,
        uid: 1000,
        gid: 100,
        pid: 4242,
        total_extlen: 0,
        padding: 0,
    }
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Parses the request as `/dev/fuse` delivers it.
fn whole<'a>(h: &'a InHeader, b: &'a [u8], neg: &Negotiated) -> Result<Request<'a>, ParseError> {
    parse(
        &Incoming {
            header: h,
            args: Args::Whole(b),
        },
        neg,
    )
}

/// Parses the request as io_uring delivers it: `f` in the 128-byte op
/// area (the rest of it garbage), `rest` in the payload.
fn split<'a>(h: &'a InHeader, op: &'a [u8], rest: &'a [u8], neg: &Negotiated) -> Result<Request<'a>, ParseError> {
    parse(
        &Incoming {
            header: h,
            args: Args::Split { op, payload: rest },
        },
        neg,
    )
}

fn op_area(f: &[u8]) -> Vec<u8> {
    let mut area = vec![0xa5u8; 128];
    area[..f.len()].copy_from_slice(f);
    area
}

/// One case: the opcode, its fixed argument and the rest as the kernel
/// sends them, and what they must parse to.
struct Case {
    opcode: u32,
    fixed: Vec<u8>,
    rest: Vec<u8>,
    want: Op<'static>,
}

fn case(opcode: u32, fixed: &[u8], rest: &[u8], want: Op<'static>) -> Case {
    Case {
        opcode,
        fixed: fixed.to_vec(),
        rest: rest.to_vec(),
        want,
    }
}

fn cases() -> Vec<Case> {
    let read = ReadIn {
        fh: 9,
        offset: 4096,
        size: 8192,
        read_flags: 0,
        lock_owner: 0,
        flags: libc::O_RDWR as u32,
        padding: 0,
    };
    let forgets = cat(&[
        ForgetOne { nodeid: 7, nlookup: 2 }.as_bytes(),
        ForgetOne { nodeid: 8, nlookup: 1 }.as_bytes(),
    ]);
    let forgets: &'static [u8] = forgets.leak();
    vec![
        case(FUSE_LOOKUP, &[], b"a/b\0", Op::Lookup { name: b"a/b" }),
        case(
            FUSE_FORGET,
            ForgetIn { nlookup: 3 }.as_bytes(),
            &[],
            Op::Forget { nlookup: 3 },
        ),
        case(
            FUSE_BATCH_FORGET,
            BatchForgetIn { count: 2, dummy: 0 }.as_bytes(),
            forgets,
            Op::BatchForget {
                nodes: Forgets(forgets),
            },
        ),
        case(
            FUSE_GETATTR,
            GetattrIn {
                getattr_flags: FUSE_GETATTR_FH,
                dummy: 0,
                fh: 12,
            }
            .as_bytes(),
            &[],
            Op::Getattr { fh: Some(12) },
        ),
        case(
            FUSE_GETATTR,
            GetattrIn::default().as_bytes(),
            &[],
            Op::Getattr { fh: None },
        ),
        case(FUSE_READLINK, &[], &[], Op::Readlink),
        case(
            FUSE_SYMLINK,
            &[],
            b"link\0/some/target\0",
            Op::Symlink {
                name: b"link",
                target: b"/some/target",
            },
        ),
        case(
            FUSE_MKNOD,
            MknodIn {
                mode: libc::S_IFCHR | 0o640,
                rdev: 0x0103,
                umask: 0o022,
                padding: 0,
            }
            .as_bytes(),
            b"dev\0",
            Op::Mknod {
                name: b"dev",
                mode: libc::S_IFCHR | 0o640,
                rdev: 0x0103,
                umask: 0o022,
            },
        ),
        case(
            FUSE_MKDIR,
            MkdirIn {
                mode: 0o755,
                umask: 0o002,
            }
            .as_bytes(),
            b"d\0",
            Op::Mkdir {
                name: b"d",
                mode: 0o755,
                umask: 0o002,
            },
        ),
        case(FUSE_UNLINK, &[], b"f\0", Op::Unlink { name: b"f" }),
        case(FUSE_RMDIR, &[], b"d\0", Op::Rmdir { name: b"d" }),
        case(
            FUSE_RENAME,
            RenameIn { newdir: 6 }.as_bytes(),
            b"old\0new\0",
            Op::Rename {
                name: b"old",
                newdir: 6,
                newname: b"new",
                flags: 0,
            },
        ),
        case(
            FUSE_RENAME2,
            Rename2In {
                newdir: 6,
                flags: libc::RENAME_EXCHANGE,
                padding: 0,
            }
            .as_bytes(),
            b"old\0new\0",
            Op::Rename {
                name: b"old",
                newdir: 6,
                newname: b"new",
                flags: libc::RENAME_EXCHANGE,
            },
        ),
        case(
            FUSE_LINK,
            LinkIn { oldnodeid: 11 }.as_bytes(),
            b"hard\0",
            Op::Link {
                oldnodeid: 11,
                newname: b"hard",
            },
        ),
        case(
            FUSE_OPEN,
            OpenIn {
                flags: (libc::O_WRONLY | libc::O_TRUNC) as u32,
                open_flags: FUSE_OPEN_KILL_SUIDGID,
            }
            .as_bytes(),
            &[],
            Op::Open {
                flags: (libc::O_WRONLY | libc::O_TRUNC) as u32,
                open_flags: FUSE_OPEN_KILL_SUIDGID,
            },
        ),
        case(
            FUSE_READ,
            read.as_bytes(),
            &[],
            Op::Read {
                fh: 9,
                offset: 4096,
                size: 8192,
                flags: libc::O_RDWR as u32,
            },
        ),
        case(
            FUSE_WRITE,
            WriteIn {
                fh: 3,
                offset: 10,
                size: 5,
                write_flags: FUSE_WRITE_KILL_SUIDGID,
                lock_owner: 0,
                flags: 1,
                padding: 0,
            }
            .as_bytes(),
            b"hello",
            Op::Write {
                fh: 3,
                offset: 10,
                data: b"hello",
                write_flags: FUSE_WRITE_KILL_SUIDGID,
                flags: 1,
            },
        ),
        case(FUSE_STATFS, &[], &[], Op::Statfs),
        case(
            FUSE_RELEASE,
            ReleaseIn {
                fh: 4,
                flags: 2,
                release_flags: FUSE_RELEASE_FLUSH,
                lock_owner: 99,
            }
            .as_bytes(),
            &[],
            Op::Release {
                fh: 4,
                flags: 2,
                release_flags: FUSE_RELEASE_FLUSH,
                lock_owner: 99,
            },
        ),
        case(
            FUSE_FSYNC,
            FsyncIn {
                fh: 4,
                fsync_flags: FUSE_FSYNC_FDATASYNC,
                padding: 0,
            }
            .as_bytes(),
            &[],
            Op::Fsync { fh: 4, datasync: true },
        ),
        case(
            FUSE_SETXATTR,
            SetxattrIn {
                size: 3,
                flags: libc::XATTR_CREATE as u32,
                setxattr_flags: FUSE_SETXATTR_ACL_KILL_SGID,
                padding: 0,
            }
            .as_bytes(),
            b"user.k\0v\0w",
            Op::Setxattr {
                name: b"user.k",
                value: b"v\0w",
                flags: libc::XATTR_CREATE as u32,
                setxattr_flags: FUSE_SETXATTR_ACL_KILL_SGID,
            },
        ),
        case(
            FUSE_GETXATTR,
            GetxattrIn { size: 64, padding: 0 }.as_bytes(),
            b"security.capability\0",
            Op::Getxattr {
                name: b"security.capability",
                size: 64,
            },
        ),
        case(
            FUSE_LISTXATTR,
            GetxattrIn { size: 0, padding: 0 }.as_bytes(),
            &[],
            Op::Listxattr { size: 0 },
        ),
        case(FUSE_REMOVEXATTR, &[], b"user.k\0", Op::Removexattr { name: b"user.k" }),
        case(
            FUSE_FLUSH,
            FlushIn {
                fh: 4,
                unused: 0,
                padding: 0,
                lock_owner: 5,
            }
            .as_bytes(),
            &[],
            Op::Flush { fh: 4, lock_owner: 5 },
        ),
        case(
            FUSE_OPENDIR,
            OpenIn {
                flags: libc::O_DIRECTORY as u32,
                open_flags: 0,
            }
            .as_bytes(),
            &[],
            Op::Opendir {
                flags: libc::O_DIRECTORY as u32,
                open_flags: 0,
            },
        ),
        case(
            FUSE_READDIR,
            read.as_bytes(),
            &[],
            Op::Readdir {
                fh: 9,
                offset: 4096,
                size: 8192,
            },
        ),
        case(
            FUSE_READDIRPLUS,
            read.as_bytes(),
            &[],
            Op::Readdirplus {
                fh: 9,
                offset: 4096,
                size: 8192,
            },
        ),
        case(
            FUSE_RELEASEDIR,
            ReleaseIn {
                fh: 8,
                flags: 3,
                release_flags: 0,
                lock_owner: 0,
            }
            .as_bytes(),
            &[],
            Op::Releasedir { fh: 8, flags: 3 },
        ),
        case(
            FUSE_FSYNCDIR,
            FsyncIn::default().as_bytes(),
            &[],
            Op::Fsyncdir { fh: 0, datasync: false },
        ),
        case(
            FUSE_ACCESS,
            AccessIn { mask: 4, padding: 0 }.as_bytes(),
            &[],
            Op::Access { mask: 4 },
        ),
        case(
            FUSE_CREATE,
            CreateIn {
                flags: (libc::O_CREAT | libc::O_RDWR) as u32,
                mode: libc::S_IFREG | 0o644,
                umask: 0o022,
                open_flags: 0,
            }
            .as_bytes(),
            b"new\0",
            Op::Create {
                name: b"new",
                flags: (libc::O_CREAT | libc::O_RDWR) as u32,
                mode: libc::S_IFREG | 0o644,
                umask: 0o022,
                open_flags: 0,
            },
        ),
        case(
            FUSE_INTERRUPT,
            InterruptIn { unique: 76 }.as_bytes(),
            &[],
            Op::Interrupt { unique: 76 },
        ),
        case(FUSE_DESTROY, &[], &[], Op::Destroy),
        case(
            FUSE_IOCTL,
            IoctlIn {
                fh: 1,
                flags: 0,
                cmd: 0x4008_6602,
                arg: 0x7fff_0000,
                in_size: 4,
                out_size: 0,
            }
            .as_bytes(),
            &[0x10, 0, 0, 0],
            Op::Ioctl {
                fh: 1,
                flags: 0,
                cmd: 0x4008_6602,
                arg: 0x7fff_0000,
                data: &[0x10, 0, 0, 0],
                out_size: 0,
            },
        ),
        case(
            FUSE_FALLOCATE,
            FallocateIn {
                fh: 1,
                offset: 100,
                length: 200,
                mode: libc::FALLOC_FL_PUNCH_HOLE as u32 | libc::FALLOC_FL_KEEP_SIZE as u32,
                padding: 0,
            }
            .as_bytes(),
            &[],
            Op::Fallocate {
                fh: 1,
                offset: 100,
                length: 200,
                mode: libc::FALLOC_FL_PUNCH_HOLE as u32 | libc::FALLOC_FL_KEEP_SIZE as u32,
            },
        ),
        case(
            FUSE_LSEEK,
            LseekIn {
                fh: 1,
                offset: 4096,
                whence: libc::SEEK_HOLE as u32,
                padding: 0,
            }
            .as_bytes(),
            &[],
            Op::Lseek {
                fh: 1,
                offset: 4096,
                whence: libc::SEEK_HOLE as u32,
            },
        ),
        case(FUSE_GETLK, &[0; 48], &[], Op::Unknown(FUSE_GETLK)),
        case(
            FUSE_COPY_FILE_RANGE_64,
            &[1; 56],
            &[],
            Op::Unknown(FUSE_COPY_FILE_RANGE_64),
        ),
    ]
}

#[test]
fn every_operation_parses_the_same_whole_and_split() {
    for c in cases() {
        let h = header(c.opcode, c.fixed.len() + c.rest.len());
        let body = cat(&[&c.fixed, &c.rest]);
        let want = Request {
            unique: 77,
            nodeid: 5,
            uid: 1000,
            gid: 100,
            pid: 4242,
            op: c.want.clone(),
        };
        assert_eq!(whole(&h, &body, &EXT), Ok(want.clone()), "opcode {} whole", c.opcode);
        // A transport may hand over its whole buffer: the header's length
        // bounds the request.
        let mut padded = body.clone();
        padded.extend_from_slice(&[0xee; 300]);
        assert_eq!(whole(&h, &padded, &EXT), Ok(want.clone()), "opcode {} padded", c.opcode);
        let area = op_area(&c.fixed);
        assert_eq!(split(&h, &area, &c.rest, &EXT), Ok(want), "opcode {} split", c.opcode);
    }
}

#[test]
fn truncated_requests_are_errors_at_every_length() {
    for c in cases() {
        let body = cat(&[&c.fixed, &c.rest]);
        let h = header(c.opcode, body.len());
        if let Op::Unknown(_) = c.want {
            // Never read: ENOSYS whatever came.
            for cut in 0..body.len() {
                let r = whole(&h, &body[..cut], &EXT).map(|r| r.op);
                assert_eq!(r, Ok(c.want.clone()));
                let r = split(&h, &body[..cut], &[], &EXT).map(|r| r.op);
                assert_eq!(r, Ok(c.want.clone()));
            }
            continue;
        }
        for cut in 0..body.len() {
            // The header promises more than came.
            assert!(whole(&h, &body[..cut], &EXT).is_err(), "opcode {} cut {cut}", c.opcode);
            // The header agrees with the cut: whatever the result, no panic,
            // and a fixed part or terminated name cut short is an error.
            let hc = header(c.opcode, cut);
            let r = whole(&hc, &body[..cut], &EXT);
            if cut < c.fixed.len() {
                assert!(r.is_err(), "opcode {} cut {cut}: {r:?}", c.opcode);
            }
        }
        for cut in 0..c.fixed.len() {
            let r = split(&h, &c.fixed[..cut], &c.rest, &EXT);
            assert!(r.is_err(), "opcode {} op cut {cut}", c.opcode);
        }
        for cut in 0..c.rest.len() {
            let area = op_area(&c.fixed);
            let r = split(&h, &area, &c.rest[..cut], &EXT);
            assert!(r.is_err(), "opcode {} payload cut {cut}", c.opcode);
        }
    }
}

#[test]
fn any_bytes_at_any_length_never_panic() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for opcode in 0..60u32 {
        for len in 0..200usize {
            let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut h = header(opcode, len);
            h.total_extlen = (next() % 4) as u16;
            for neg in [
                EXT,
                Negotiated::default(),
                Negotiated {
                    minor: 8,
                    setxattr_ext: false,
                },
            ] {
                let _ = whole(&h, &body, &neg);
                let cut = (next() as usize) % (len + 1);
                let _ = split(&h, &body[..cut], &body[cut..], &neg);
                h.len = next() as u32;
                let _ = whole(&h, &body, &neg);
            }
        }
    }
}

#[test]
fn names_need_their_nul() {
    let h = header(FUSE_LOOKUP, 3);
    assert_eq!(
        whole(&h, b"abc", &EXT),
        Err(ParseError::Unterminated { opcode: FUSE_LOOKUP })
    );
    // Symlink's target too.
    let h = header(FUSE_SYMLINK, 6);
    assert!(whole(&h, b"l\0targ", &EXT).is_err());
}

#[test]
fn sizes_must_match_the_bytes_that_came() {
    let w = WriteIn {
        size: 6,
        ..WriteIn::default()
    };
    let body = cat(&[w.as_bytes(), b"hello"]);
    let h = header(FUSE_WRITE, body.len());
    assert_eq!(
        whole(&h, &body, &EXT),
        Err(ParseError::SizeMismatch {
            opcode: FUSE_WRITE,
            said: 6,
            came: 5
        })
    );
    let f = BatchForgetIn { count: 3, dummy: 0 };
    let body = cat(&[f.as_bytes(), &[0; 32]]);
    let h = header(FUSE_BATCH_FORGET, body.len());
    assert!(whole(&h, &body, &EXT).is_err());
}

#[test]
fn setxattr_reads_the_form_negotiated() {
    let compat = Negotiated {
        setxattr_ext: false,
        ..EXT
    };
    let old = SetxattrInCompat { size: 2, flags: 1 };
    let body = cat(&[old.as_bytes(), b"user.a\0xy"]);
    let h = header(FUSE_SETXATTR, body.len());
    let want = Op::Setxattr {
        name: b"user.a",
        value: b"xy",
        flags: 1,
        setxattr_flags: 0,
    };
    assert_eq!(whole(&h, &body, &compat).map(|r| r.op), Ok(want));
    // The same bytes read as the extended form take the name as flags.
    assert!(whole(&h, &body, &EXT).is_err());
}

#[test]
fn older_minors_send_shorter_structs() {
    let old = Negotiated {
        minor: 8,
        setxattr_ext: false,
    };
    // GETATTR without an argument, MKNOD without umask.
    let h = header(FUSE_GETATTR, 0);
    assert_eq!(whole(&h, &[], &old).map(|r| r.op), Ok(Op::Getattr { fh: None }));
    let body = cat(&[&[0o644u32.to_ne_bytes(), 7u32.to_ne_bytes()].concat(), b"n\0"]);
    let h = header(FUSE_MKNOD, body.len());
    let want = Op::Mknod {
        name: b"n",
        mode: 0o644,
        rdev: 7,
        umask: 0,
    };
    assert_eq!(whole(&h, &body, &old).map(|r| r.op), Ok(want));
    // A 24-byte write_in, then the data.
    let w = WriteIn {
        offset: 3,
        size: 2,
        ..WriteIn::default()
    };
    let body = cat(&[&w.as_bytes()[..FUSE_COMPAT_WRITE_IN_SIZE], b"ab"]);
    let h = header(FUSE_WRITE, body.len());
    let want = Op::Write {
        fh: 0,
        offset: 3,
        data: b"ab",
        write_flags: 0,
        flags: 0,
    };
    assert_eq!(whole(&h, &body, &old).map(|r| r.op), Ok(want));
}

#[test]
fn init_takes_flags2_only_with_init_ext() {
    let mut i = InitIn {
        major: 7,
        minor: 45,
        max_readahead: 131072,
        flags: (FUSE_ASYNC_READ | FUSE_INIT_EXT) as u32,
        flags2: (FUSE_OVER_IO_URING >> 32) as u32,
        unused: [0; 11],
    };
    let h = header(FUSE_INIT, 64);
    let want = |flags| Op::Init {
        major: 7,
        minor: 45,
        max_readahead: 131072,
        flags,
    };
    let r = whole(&h, i.as_bytes(), &EXT).map(|r| r.op);
    assert_eq!(r, Ok(want(FUSE_ASYNC_READ | FUSE_INIT_EXT | FUSE_OVER_IO_URING)));
    i.flags = FUSE_ASYNC_READ as u32;
    let r = whole(&h, i.as_bytes(), &EXT).map(|r| r.op);
    assert_eq!(r, Ok(want(FUSE_ASYNC_READ)));
    // A kernel before 7.36 sends 16 bytes.
    let h = header(FUSE_INIT, 16);
    let r = whole(&h, &i.as_bytes()[..16], &EXT).map(|r| r.op);
    assert_eq!(r, Ok(want(FUSE_ASYNC_READ)));
    let h = header(FUSE_INIT, 12);
    assert!(whole(&h, &i.as_bytes()[..12], &EXT).is_err());
}

#[test]
fn extensions_after_the_arguments_are_left_out() {
    // A 16-byte extension (total_extlen 2) after a create's name.
    let c = CreateIn {
        mode: 0o600,
        ..CreateIn::default()
    };
    let ext = [0xffu8; 16];
    let body = cat(&[c.as_bytes(), b"f\0", &[0; 6], &ext]);
    let mut h = header(FUSE_CREATE, body.len());
    h.total_extlen = 2;
    let want = Op::Create {
        name: b"f",
        flags: 0,
        mode: 0o600,
        umask: 0,
        open_flags: 0,
    };
    assert_eq!(whole(&h, &body, &EXT).map(|r| r.op), Ok(want.clone()));
    let area = op_area(c.as_bytes());
    assert_eq!(split(&h, &area, &body[16..], &EXT).map(|r| r.op), Ok(want));
    // Write data must not run into the extension.
    let w = WriteIn {
        size: 4,
        ..WriteIn::default()
    };
    let body = cat(&[w.as_bytes(), b"data", &[0; 8]]);
    let mut h = header(FUSE_WRITE, body.len());
    h.total_extlen = 1;
    assert!(matches!(
        whole(&h, &body, &EXT).map(|r| r.op),
        Ok(Op::Write { data: b"data", .. })
    ));
    let area = op_area(w.as_bytes());
    assert!(matches!(
        split(&h, &area, &body[40..], &EXT).map(|r| r.op),
        Ok(Op::Write { data: b"data", .. })
    ));
    // The payload holds the extension too, as the header's length says.
    assert!(split(&h, &area, &body[40..44], &EXT).is_err());
    // Extensions longer than the whole request are an error.
    h.total_extlen = 7;
    assert!(whole(&h, &body, &EXT).is_err());
    assert!(split(&h, &area, &body[40..], &EXT).is_err());
}

#[test]
fn setattr_takes_only_the_fields_marked_valid() {
    let a = SetattrIn {
        valid: FATTR_MODE | FATTR_ATIME | FATTR_MTIME | FATTR_MTIME_NOW | FATTR_CTIME | FATTR_KILL_SUIDGID,
        mode: 0o4755,
        uid: 5,
        size: 99,
        // 1960-05-01 12:00:00.123456789: seconds rounded down, nanoseconds
        // counted forwards.
        atime: (-305_812_800i64) as u64,
        atimensec: 123_456_789,
        ctime: 1_700_000_000,
        ctimensec: 5,
        ..SetattrIn::default()
    };
    let h = header(FUSE_SETATTR, size_of::<SetattrIn>());
    let want = Setattr {
        mode: Some(0o4755),
        atime: Some(SetTime::At(-305_812_800_000_000_000 + 123_456_789)),
        mtime: Some(SetTime::Now),
        ctime: Some(1_700_000_000_000_000_005),
        kill_suidgid: true,
        ..Setattr::default()
    };
    assert_eq!(whole(&h, a.as_bytes(), &EXT).map(|r| r.op), Ok(Op::Setattr(want)));
}

#[test]
fn kernel_times_saturate_instead_of_wrapping() {
    assert_eq!(nanos(0, 0), 0);
    assert_eq!(nanos((-1i64) as u64, 999_999_999), -1);
    assert_eq!(nanos(u64::MAX / 2, 0), i64::MAX);
    assert_eq!(nanos((i64::MIN) as u64, 0), i64::MIN);
}

#[test]
fn batch_forget_lists_each_node() {
    let body = cat(&[
        BatchForgetIn { count: 2, dummy: 0 }.as_bytes(),
        ForgetOne { nodeid: 7, nlookup: 2 }.as_bytes(),
        ForgetOne { nodeid: 8, nlookup: 1 }.as_bytes(),
    ]);
    // Misaligned on purpose: the payload need not be 8-byte aligned.
    let mut buf = vec![0u8];
    buf.extend_from_slice(&body);
    let h = header(FUSE_BATCH_FORGET, body.len());
    let Ok(Request {
        op: Op::BatchForget { nodes },
        ..
    }) = whole(&h, &buf[1..], &EXT)
    else {
        panic!("not a batch forget");
    };
    let got: Vec<(u64, u64)> = nodes.map(|n| (n.nodeid, n.nlookup)).collect();
    assert_eq!(got, [(7, 2), (8, 1)]);
}
