use super::*;

fn le32(v: u32) -> [u8; 4] {
    v.to_ne_bytes()
}

fn le64(v: u64) -> [u8; 8] {
    v.to_ne_bytes()
}

fn sample_attr() -> Attr {
    Attr {
        ino: 42,
        size: 4096,
        blocks: 8,
        atime: 1,
        mtime: 2,
        ctime: 3,
        atimensec: 4,
        mtimensec: 5,
        ctimensec: 6,
        mode: libc::S_IFREG | 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// `fuse_attr` as the kernel lays it out, field by field.
fn attr_bytes(a: &Attr) -> Vec<u8> {
    [
        &le64(a.ino)[..],
        &le64(a.size),
        &le64(a.blocks),
        &le64(a.atime),
        &le64(a.mtime),
        &le64(a.ctime),
        &le32(a.atimensec),
        &le32(a.mtimensec),
        &le32(a.ctimensec),
        &le32(a.mode),
        &le32(a.nlink),
        &le32(a.uid),
        &le32(a.gid),
        &le32(a.rdev),
        &le32(a.blksize),
        &le32(a.flags),
    ]
    .concat()
}

fn entry_bytes(a: &Attr, generation: u64, secs: u64, nsec: u32) -> Vec<u8> {
    [
        &le64(a.ino)[..],
        &le64(generation),
        &le64(secs),
        &le64(secs),
        &le32(nsec),
        &le32(nsec),
        &attr_bytes(a),
    ]
    .concat()
}

#[test]
fn entry_and_attr_replies_are_laid_out_as_the_kernel_reads_them() {
    let a = sample_attr();
    let mut out = [0xffu8; 200];
    let e = entry_out(a, 7, Duration::new(3600, 250));
    assert_eq!(entry(&mut out, &e), Ok(128));
    assert_eq!(&out[..128], &entry_bytes(&a, 7, 3600, 250)[..]);
    let mut out = [0xffu8; 200];
    assert_eq!(attr(&mut out, a, Duration::new(1, 2)), Ok(104));
    let want = [&le64(1)[..], &le32(2), &le32(0), &attr_bytes(&a)].concat();
    assert_eq!(&out[..104], &want[..]);
}

#[test]
fn open_create_write_lseek_and_xattr_size_replies() {
    let mut out = [0xffu8; 256];
    assert_eq!(open(&mut out, 9, FOPEN_KEEP_CACHE), Ok(16));
    assert_eq!(&out[..16], &[&le64(9)[..], &le32(2), &le32(0)].concat()[..]);
    let a = sample_attr();
    let e = entry_out(a, 1, Duration::from_secs(5));
    assert_eq!(create(&mut out, &e, 0, FOPEN_KEEP_CACHE), Ok(144));
    let want = [&entry_bytes(&a, 1, 5, 0)[..], &le64(0), &le32(2), &le32(0)].concat();
    assert_eq!(&out[..144], &want[..]);
    assert_eq!(write(&mut out, 4096), Ok(8));
    assert_eq!(&out[..8], &[&le32(4096)[..], &le32(0)].concat()[..]);
    assert_eq!(lseek(&mut out, 1 << 40), Ok(8));
    assert_eq!(&out[..8], &le64(1 << 40));
    assert_eq!(xattr_size(&mut out, 33), Ok(8));
    assert_eq!(&out[..8], &[&le32(33)[..], &le32(0)].concat()[..]);
}

#[test]
fn statfs_data_and_ioctl_replies() {
    let mut out = [0xffu8; 128];
    let st = Kstatfs {
        blocks: 100,
        bfree: 50,
        bavail: 40,
        files: 30,
        ffree: 20,
        bsize: 4096,
        namelen: 255,
        frsize: 4096,
        padding: 0,
        spare: [0; 6],
    };
    assert_eq!(statfs(&mut out, &st), Ok(80));
    let want = [
        &le64(100)[..],
        &le64(50),
        &le64(40),
        &le64(30),
        &le64(20),
        &le32(4096),
        &le32(255),
        &le32(4096),
        &[0; 28],
    ]
    .concat();
    assert_eq!(&out[..80], &want[..]);
    assert_eq!(data(&mut out, b"target"), Ok(6));
    assert_eq!(&out[..6], b"target");
    assert_eq!(ioctl(&mut out, 0, &0x10u32.to_ne_bytes()), Ok(20));
    assert_eq!(&out[..20], &[&[0u8; 16][..], &le32(0x10)].concat()[..]);
    let buf = data_buf(&mut out, 100).map(|b| b.len());
    assert_eq!(buf, Ok(100));
    assert_eq!(
        data_buf(&mut out, 129).map(|b| b.len()),
        Err(TooSmall { need: 129, have: 128 })
    );
}

#[test]
fn init_reply_is_cut_to_what_the_kernel_knows() {
    let i = InitOut {
        major: 7,
        minor: 45,
        max_readahead: 1 << 20,
        flags: 0x1234,
        max_background: 16,
        congestion_threshold: 12,
        max_write: 1 << 20,
        time_gran: 1,
        max_pages: 256,
        map_alignment: 0,
        flags2: 0x200,
        max_stack_depth: 0,
        request_timeout: 0,
        unused: [0; 11],
    };
    let want = [
        &le32(7)[..],
        &le32(45),
        &le32(1 << 20),
        &le32(0x1234),
        &16u16.to_ne_bytes(),
        &12u16.to_ne_bytes(),
        &le32(1 << 20),
        &le32(1),
        &256u16.to_ne_bytes(),
        &0u16.to_ne_bytes(),
        &le32(0x200),
        // max_stack_depth, request_timeout, unused.
        &[0; 28],
    ]
    .concat();
    let mut out = [0xffu8; 64];
    assert_eq!(init(&mut out, &i, 45), Ok(64));
    assert_eq!(&out[..], &want[..]);
    assert_eq!(init(&mut out, &i, 22), Ok(24));
    assert_eq!(init(&mut out, &i, 4), Ok(8));
}

#[test]
fn replies_that_do_not_fit_are_errors() {
    let mut out = [0u8; 100];
    let e = entry_out(sample_attr(), 0, Duration::ZERO);
    assert_eq!(entry(&mut out, &e), Err(TooSmall { need: 128, have: 100 }));
    assert_eq!(create(&mut out, &e, 0, 0), Err(TooSmall { need: 144, have: 100 }));
    assert_eq!(data(&mut out, &[1; 101]), Err(TooSmall { need: 101, have: 100 }));
    assert_eq!(statfs(&mut out[..79], &Kstatfs::default()).map_err(|e| e.need), Err(80));
}

#[test]
fn dirents_are_packed_to_8_bytes_with_zeroed_padding() {
    let mut out = [0xffu8; 256];
    let mut d = DirBuf::new(&mut out, 256);
    assert!(!d.add(1, 1, dirent_type(libc::S_IFDIR), b"."));
    assert!(!d.add(30, 9, dirent_type(libc::S_IFREG), b"hello.txt"));
    assert_eq!(d.len(), 32 + 40);
    let want = [
        &le64(1)[..],
        &le64(1),
        &le32(1),
        &le32(4), // DT_DIR
        b".",
        &[0; 7],
        &le64(30),
        &le64(9),
        &le32(9),
        &le32(8), // DT_REG
        b"hello.txt",
        &[0; 7],
    ]
    .concat();
    assert_eq!(&out[..72], &want[..]);
}

#[test]
fn a_listing_stops_at_the_first_entry_past_the_size_asked() {
    let mut out = [0u8; 4096];
    // 24 + 8 = 32 bytes per one-to-eight-byte name.
    let mut d = DirBuf::new(&mut out, 80);
    assert!(!d.add(1, 1, 4, b"a"));
    assert!(!d.add(2, 2, 4, b"bbbbbbbb"));
    assert!(d.add(3, 3, 8, b"c"), "64 + 32 > 80");
    // An exact fit fits.
    let mut d = DirBuf::new(&mut out, 64);
    assert!(!d.add(1, 1, 4, b"a"));
    assert!(!d.add(2, 2, 4, b"b"));
    assert!(d.add(3, 3, 4, b""));
    assert_eq!(d.len(), 64);
    // The buffer bounds it too, whatever the kernel asked.
    let mut small = [0u8; 40];
    let mut d = DirBuf::new(&mut small, 4096);
    assert!(!d.add(1, 1, 4, b"a"));
    assert!(d.add(2, 2, 4, b"b"));
    assert_ne!(d.len(), 0);
}

#[test]
fn direntplus_records_carry_the_entry_then_the_dirent() {
    let a = sample_attr();
    let e = entry_out(a, 3, Duration::from_secs(10));
    let mut out = [0xffu8; 512];
    let mut d = DirBuf::new(&mut out, 512);
    assert!(!d.add_plus(&e, 77, dirent_type(a.mode), b"file"));
    // 128 + 24 + 4 = 156, padded to 160.
    assert_eq!(d.len(), 160);
    let want = [
        &entry_bytes(&a, 3, 10, 0)[..],
        &le64(42),
        &le64(77),
        &le32(4),
        &le32(8),
        b"file",
        &[0; 4],
    ]
    .concat();
    assert_eq!(&out[..160], &want[..]);
    let mut d = DirBuf::new(&mut out, 159);
    assert!(d.add_plus(&e, 77, 8, b"file"));
    assert_eq!(d.len(), 0);
}

#[test]
fn an_inode_invalidation_carries_its_struct() {
    let mut out = [0xffu8; 64];
    assert_eq!(notify_inval_inode(&mut out, 5, -1, 0), Ok(24));
    assert_eq!(
        &out[..24],
        &[&le64(5)[..], &(-1i64).to_ne_bytes(), &le64(0)].concat()[..]
    );
}
