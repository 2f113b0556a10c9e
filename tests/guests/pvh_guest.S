/*
 * A minimal PVH guest for ch-launcher's tests (GNU as, AT&T syntax).
 *
 * Booted by Cloud Hypervisor (direct kernel boot) or QEMU (-kernel) through the PVH entry:
 * the ELF note XEN_ELFNOTE_PHYS32_ENTRY (type 18, name "Xen") gives the 32-bit entry point,
 * entered in 32-bit protected mode, paging off, flat segments, %ebx = physical address of
 * struct hvm_start_info (magic 0x336ec578 at 0, cmdline_paddr, a 64-bit field, at 24,
 * rsdp_paddr, 64-bit, at 32: Xen's public/arch-x86/hvm/start_info.h).
 *
 * On COM1 (0x3f8) it prints a banner and its command line, then echoes every character it
 * reads (polling the line status register), prints "heartbeat N" about every 5 s (TSC, its
 * rate from CPUID), and obeys the words "poweroff", "panic", "reboot" and "ping" on its
 * command line and on typed lines:
 *   poweroff: Cloud Hypervisor's ACPI shutdown port (byte 0x34 = S5|SLP_EN to 0x600), then
 *             the ACPI PM1a control register QEMU's firmware places at 0x604 (q35 and pc:
 *             SLP_EN with SLP_TYP 0 = soft off, word 0x2000), then isa-debug-exit (0xf4).
 *   panic:    pvpanic: a PCI scan (0xcf8/0xcfc) for 1b36:0011 and a write of 1 to its BAR0
 *             (Cloud Hypervisor, QEMU's pvpanic-pci), and port 0x505 (QEMU's ISA pvpanic).
 *   reboot:   Cloud Hypervisor's ACPI reset (byte 1 to 0x600), the reset control register
 *             0xcf9 (0x06), then the keyboard controller (0xfe to 0x64).
 * It also polls the ACPI power button (no interrupts): Cloud Hypervisor's GED notification
 * register (found in the DSDT or an SSDT; CH puts it far above 4 GiB, so the guest then turns on
 * paging, in IA-32e compatibility mode, to reach it) or QEMU's PM1a_STS.PWRBTN_STS, and when it
 * is pressed prints
 * "guest: ACPI power button: powering off" and powers off -- unless the word "ignore-acpi"
 * (command line or typed) was seen: then it prints "guest: ignoring the power button".
 * Under Cloud Hypervisor it also ejects the PCI devices CH asks it to remove (the GED's
 * PCI_DEVICES_CHANGED, CH's PCI hotplug registers PCST found in the same AML: pci_hotplug),
 * printing "guest: ACPI PCI hotplug: ejected slot N" -- unless the word "no-eject" was seen.
 */

#define COM1            0x3f8
#define HVM_MAGIC       0x336ec578
#define HEARTBEAT_SECS  5

        .code32

/* ---- the PVH entry note ---- */
        .section .note.Xen, "a", @note
        .balign 4
        .long   4               /* namesz: "Xen\0" */
        .long   8               /* descsz */
        .long   18              /* XEN_ELFNOTE_PHYS32_ENTRY */
        .asciz  "Xen"
        .balign 4
        .quad   pvh_start       /* 32-bit entry, stored as 64 bits like Linux does */
        .balign 4

/* ---- what the guest can reach, for the VMM double (docs/vmm-double.md, "The power button"):
   the double runs no guest code, so the guest says how it reaches Cloud Hypervisor's GED
   register (map_ged below): any physical address below the CPU's MAXPHYADDR (0), through
   4-level paging (2; 1 would be 32-bit PAE paging, 0 flat 32-bit addressing only). Keep it
   true when map_ged changes. */
        .section .note.chl, "a", @note
        .balign 4
        .long   15              /* namesz: "chl-test-guest\0" */
        .long   8               /* descsz */
        .long   1               /* type 1: how the ACPI GED register is reached */
        .asciz  "chl-test-guest"
        .balign 4
        .long   0               /* address bits it maps: 0 = the CPU's MAXPHYADDR */
        .long   2               /* paging: 0 none (below 4 GiB), 1 PAE, 2 4-level */
        .balign 4
/* type 2: what the guest does when Cloud Hypervisor asks it (GED PCI_DEVICES_CHANGED, PCID)
   to remove a PCI device: 1 = it ejects it through B0EJ (pci_hotplug below), as an ACPI OS
   does; 0 (or no such entry) = it never does, and CH keeps the device. Keep it true when
   pci_hotplug changes. */
        .long   15              /* namesz */
        .long   4               /* descsz */
        .long   2               /* type 2: ACPI PCI hot-unplug */
        .asciz  "chl-test-guest"
        .balign 4
        .long   1               /* ejects */
        .balign 4

        .text
        .globl  pvh_start
pvh_start:
        cli
        cld
        movl    $stack_top, %esp
        movl    %ebx, start_info
        movl    $0, line_len
        movl    $0, beat_count
        movl    $0, ignore_acpi
        movl    $0, no_eject

        call    uart_init
        movl    $msg_banner, %esi
        call    puts

        /* The command line: hvm_start_info.cmdline_paddr (low 32 bits; it is below 4 GiB). */
        movl    $msg_cmdline, %esi
        call    puts
        movl    start_info, %ebx
        movl    $0, cmdline
        testl   %ebx, %ebx
        jz      1f
        cmpl    $HVM_MAGIC, (%ebx)
        jne     1f
        movl    24(%ebx), %esi
        movl    %esi, cmdline
        testl   %esi, %esi
        jz      1f
        call    puts
1:      movl    $msg_crlf, %esi
        call    puts

        call    tsc_setup
        call    pwrbtn_setup
        movl    $msg_ready, %esi
        call    puts

        /* Act on the command line's words. */
        movl    cmdline, %esi
        testl   %esi, %esi
        jz      main_loop
        call    run_words

main_loop:
        /* A character waiting? (LSR bit 0) */
        movw    $COM1+5, %dx
        inb     %dx, %al
        testb   $1, %al
        jz      2f
        movw    $COM1, %dx
        inb     %dx, %al
        call    on_char
2:      call    heartbeat_poll
        call    pwrbtn_poll
        pause
        jmp     main_loop

/* ---- input ---- */

/* on_char: %al = the byte read. Echo it; at end of line run the line. */
on_char:
        cmpb    $'\r', %al
        je      3f
        cmpb    $'\n', %al
        je      3f
        cmpb    $0x7f, %al              /* DEL / backspace */
        je      5f
        cmpb    $0x08, %al
        je      5f
        call    putc
        movl    line_len, %ecx
        cmpl    $255, %ecx
        jae     4f
        movb    %al, line_buf(%ecx)
        incl    %ecx
        movl    %ecx, line_len
4:      ret
5:      call    putc
        movl    line_len, %ecx
        testl   %ecx, %ecx
        jz      4b
        decl    %ecx
        movl    %ecx, line_len
        ret
3:      movl    $msg_crlf, %esi
        call    puts
        movl    line_len, %ecx
        movb    $0, line_buf(%ecx)
        movl    $0, line_len
        movl    $line_buf, %esi
        jmp     run_words

/* run_words: %esi = NUL-terminated text; run each known word in order. */
run_words:
6:      /* skip spaces */
        movb    (%esi), %al
        testb   %al, %al
        jz      9f
        cmpb    $' ', %al
        je      7f
        cmpb    $'\t', %al
        je      7f
        /* a word starts at %esi: compare with each command */
        movl    $cmd_table, %ebx
8:      movl    (%ebx), %edi            /* command name, 0 ends the table */
        testl   %edi, %edi
        jz      10f
        call    word_equals
        jnc     11f
        pushl   %esi
        call    *4(%ebx)
        popl    %esi
        jmp     10f
11:     addl    $8, %ebx
        jmp     8b
10:     /* skip to the end of this word */
        movb    (%esi), %al
        testb   %al, %al
        jz      9f
        cmpb    $' ', %al
        je      6b
        cmpb    $'\t', %al
        je      6b
        incl    %esi
        jmp     10b
7:      incl    %esi
        jmp     6b
9:      ret

/* word_equals: CF=1 when the word at %esi equals the NUL-terminated %edi. Keeps %esi. */
word_equals:
        pushl   %esi
        pushl   %edi
12:     movb    (%edi), %al
        testb   %al, %al
        jz      13f
        cmpb    (%esi), %al
        jne     14f
        incl    %esi
        incl    %edi
        jmp     12b
13:     movb    (%esi), %al             /* the word must end here too */
        testb   %al, %al
        jz      15f
        cmpb    $' ', %al
        je      15f
        cmpb    $'\t', %al
        je      15f
14:     popl    %edi
        popl    %esi
        clc
        ret
15:     popl    %edi
        popl    %esi
        stc
        ret

/* ---- commands ---- */

do_ping:
        movl    $msg_pong, %esi
        jmp     puts

do_poweroff:
        movl    $msg_poweroff, %esi
        call    puts
        call    uart_drain
        movw    $0x600, %dx             /* Cloud Hypervisor: ACPI shutdown device, S5 */
        movb    $0x34, %al
        outb    %al, %dx
        movw    $0x604, %dx             /* QEMU q35/pc: PM1a_CNT, SLP_EN | SLP_TYP 0 */
        movw    $0x2000, %ax
        outw    %ax, %dx
        movw    $0xf4, %dx              /* QEMU isa-debug-exit, if present */
        movb    $0x10, %al
        outb    %al, %dx
        call    settle
        movl    $msg_still_here, %esi
        call    puts
        jmp     halt_forever

do_reboot:
        movl    $msg_reboot, %esi
        call    puts
        call    uart_drain
        movw    $0x600, %dx             /* Cloud Hypervisor: ACPI reset */
        movb    $1, %al
        outb    %al, %dx
        movw    $0xcf9, %dx             /* reset control register: full reset */
        movb    $0x02, %al
        outb    %al, %dx
        movb    $0x06, %al
        outb    %al, %dx
        movw    $0x64, %dx              /* keyboard controller: pulse reset */
        movb    $0xfe, %al
        outb    %al, %dx
        call    settle
        movl    $msg_still_here, %esi
        call    puts
        jmp     halt_forever

do_panic:
        movl    $msg_panic, %esi
        call    puts
        call    uart_drain
        /* PCI: bus 0, devices 0..31, function 0: look for vendor 1b36 device 0011. */
        xorl    %ecx, %ecx
16:     movl    %ecx, %eax
        shll    $11, %eax
        orl     $0x80000000, %eax       /* enable | bus 0 | dev << 11 | fn 0 | reg 0 */
        movw    $0xcf8, %dx
        outl    %eax, %dx
        movw    $0xcfc, %dx
        inl     %dx, %eax
        cmpl    $0x00111b36, %eax
        je      17f
        incl    %ecx
        cmpl    $32, %ecx
        jb      16b
        jmp     18f
17:     movl    %ecx, %eax              /* BAR0 at register 0x10 */
        shll    $11, %eax
        orl     $0x80000010, %eax
        movw    $0xcf8, %dx
        outl    %eax, %dx
        movw    $0xcfc, %dx
        inl     %dx, %eax
        testb   $1, %al                 /* an I/O BAR */
        jnz     19f
        andl    $0xfffffff0, %eax
        jz      18f
        movb    $1, (%eax)              /* PVPANIC_PANICKED */
        jmp     18f
19:     andl    $0xfffffffc, %eax
        movw    %ax, %dx
        movb    $1, %al
        outb    %al, %dx
18:     movw    $0x505, %dx             /* QEMU's ISA pvpanic */
        movb    $1, %al
        outb    %al, %dx
        movl    $msg_panicked, %esi
        call    puts
        jmp     halt_forever

halt_forever:
        cli
20:     hlt
        jmp     20b

do_ignore_acpi:
        movl    $1, ignore_acpi
        ret

do_no_eject:
        movl    $1, no_eject
        ret

/* ---- the ACPI power button, polled (interrupts stay off) ---- */

/* pwrbtn_setup: Cloud Hypervisor or QEMU?  CH's DSDT declares its GED notification register
   as an OperationRegion named GDST in SystemMemory (devices/src/acpi.rs, AcpiGedDevice); the
   guest finds it like an ACPI OS would: hvm_start_info.rsdp_paddr -> RSDP -> XSDT/RSDT ->
   FACP -> DSDT, and every SSDT, scanning their AML for the bytes 5b 80 "GDST" 00 <address>.
   Found: poll that byte (bit 3 = power button).  CH allocates it from its platform MMIO area
   at the top of the guest physical address space (vmm/src/memory_manager.rs: the last MiB
   below 2^phys_bits - 64 KiB), far above 4 GiB, so the guest turns on PAE paging to reach it
   (map_ged).  Not found: QEMU's PM1 event block at 0x600: set PWRBTN_EN (bit 8 of PM1a_EN,
   0x602) so system_powerdown sets PWRBTN_STS (bit 8 of PM1a_STS, 0x600) -- QEMU sets it only
   when enabled (hw/acpi/core.c, acpi_pm1_evt_power_down).  CH's 0x600 device accepts only
   1-byte accesses (it logs a warning for others), so the 16-bit QEMU path is never used when
   a GDST region was found, even one the guest cannot map (then the button is not polled). */
pwrbtn_setup:
        pushl   %ebx
        pushl   %ebp
        movl    $0, ged_addr
        movl    $0, ged_found
        movl    $0, pcst_addr
        movl    $0, pcst_lo
        movl    $0, pcst_hi
        movl    $0, pcst_found
        movl    $1, pci_segments
        movl    $0, pwrbtn_mode
        movl    start_info, %ebx
        testl   %ebx, %ebx
        jz      40f
        cmpl    $HVM_MAGIC, (%ebx)
        jne     40f
        cmpl    $0, 36(%ebx)            /* rsdp_paddr (64-bit at 32) below 4 GiB */
        jne     40f
        movl    32(%ebx), %esi
        testl   %esi, %esi
        jnz     55f
        /* No rsdp_paddr (QEMU's PVH option ROM leaves it 0): the BIOS area, as an OS does. */
        movl    $0xe0000, %esi
56:     cmpl    $0x20445352, (%esi)
        jne     57f
        cmpl    $0x20525450, 4(%esi)
        je      55f
57:     addl    $16, %esi
        cmpl    $0x100000, %esi
        jb      56b
        jmp     40f
55:     cmpl    $0x20445352, (%esi)     /* "RSD " */
        jne     40f
        cmpl    $0x20525450, 4(%esi)    /* "PTR " */
        jne     40f
        movl    $4, %ebp                /* RSDT: 32-bit entries */
        movl    16(%esi), %edi
        cmpb    $2, 15(%esi)            /* revision >= 2: XSDT, 64-bit entries */
        jb      41f
        cmpl    $0, 28(%esi)
        jne     41f
        movl    24(%esi), %eax
        testl   %eax, %eax
        jz      41f
        movl    %eax, %edi
        movl    $8, %ebp
41:     testl   %edi, %edi
        jz      40f
        leal    36(%edi), %ecx          /* entries follow the 36-byte header */
        movl    %edi, %edx
        addl    4(%edi), %edx           /* end of the table */
42:     leal    (%ecx,%ebp), %eax
        cmpl    %edx, %eax
        ja      39f                     /* every table seen */
        movl    (%ecx), %esi
        cmpl    $8, %ebp
        jne     43f
        cmpl    $0, 4(%ecx)             /* a table above 4 GiB: out of reach */
        jne     44f
43:     testl   %esi, %esi
        jz      44f
        movl    %esi, %edi
        cmpl    $0x54445353, (%esi)     /* "SSDT": scan it */
        je      48f
        cmpl    $0x4746434d, (%esi)     /* "MCFG": one 16-byte entry per PCI segment */
        je      38f
        cmpl    $0x50434146, (%esi)     /* "FACP": scan its DSDT */
        jne     44f
        movl    40(%esi), %edi          /* DSDT (32-bit) */
        cmpl    $148, 4(%esi)           /* X_DSDT (64-bit at 140) when the FADT has it */
        jb      46f
        cmpl    $0, 144(%esi)
        jne     46f
        movl    140(%esi), %eax
        testl   %eax, %eax
        jz      46f
        movl    %eax, %edi
46:     testl   %edi, %edi
        jz      44f
        cmpl    $0x54445344, (%edi)     /* "DSDT" */
        jne     44f
48:     cmpl    $0, ged_found
        jne     37f
        movl    $0x54534447, %ebx       /* "GDST" */
        call    aml_find_region
        jc      37f
        movl    $1, ged_found
        movl    region_lo, %eax
        movl    %eax, ged_lo
        movl    region_hi, %eax
        movl    %eax, ged_hi
37:     cmpl    $0, pcst_found
        jne     44f
        movl    $0x54534350, %ebx       /* "PCST" (SystemMemory: QEMU's PCST is SystemIO) */
        call    aml_find_region
        jc      44f
        movl    $1, pcst_found
        movl    region_lo, %eax
        movl    %eax, pcst_lo
        movl    region_hi, %eax
        movl    %eax, pcst_hi
        jmp     44f
38:     movl    4(%esi), %eax           /* (length - 44) / 16 segments, 1 to 256 */
        subl    $44, %eax
        jb      44f
        shrl    $4, %eax
        jz      44f
        cmpl    $256, %eax
        jbe     36f
        movl    $256, %eax
36:     movl    %eax, pci_segments
44:     addl    %ebp, %ecx
        jmp     42b
39:     cmpl    $0, ged_found           /* no GDST: QEMU */
        je      40f
        /* Found: ged_hi:ged_lo (and PCST's). Below 4 GiB a flat access reaches them; above, map them. */
        cmpl    $0, ged_hi
        jne     47f
        cmpl    $0, pcst_hi
        jne     47f
        movl    ged_lo, %eax
        movl    %eax, ged_addr
        movl    pcst_lo, %eax
        movl    %eax, pcst_addr
        jmp     45f
47:     call    map_ged
        jc      50f                     /* out of reach: no polling at all */
45:     movl    $2, pwrbtn_mode
        movl    $msg_ged, %esi
        call    puts
        movl    ged_hi, %eax
        call    put_hex
        movl    ged_lo, %eax
        call    put_hex
        movl    $msg_crlf, %esi
        call    puts
        cmpl    $0, pcst_addr
        je      50f
        movl    $msg_pcst, %esi
        call    puts
        movl    pcst_hi, %eax
        call    put_hex
        movl    pcst_lo, %eax
        call    put_hex
        movl    $msg_pcst_segments, %esi
        call    puts
        movl    pci_segments, %eax
        call    put_dec
        movl    $msg_crlf, %esi
        call    puts
        jmp     50f
40:     /* QEMU: PM1a_EN |= PWRBTN_EN */
        movw    $0x602, %dx
        inw     %dx, %ax
        orw     $0x100, %ax
        outw    %ax, %dx
        movl    $1, pwrbtn_mode
50:     popl    %ebp
        popl    %ebx
        ret

/* aml_find_region: %edi = a DSDT or SSDT, %ebx = a region's 4-character name. Scans its AML
   for OperationRegion (<name>, SystemMemory, <DWord or QWord address>, ...): CF=0 and
   region_hi:region_lo = the address when found, else CF=1.
   Keeps %ebx, %ecx, %edx, %ebp, %esi, %edi. */
aml_find_region:
        pushl   %ecx
        pushl   %edx
        movl    %edi, %edx
        addl    4(%edi), %edx
        subl    $16, %edx               /* room for the opcode, name, space and a qword */
        leal    36(%edi), %ecx
60:     cmpl    %edx, %ecx
        ja      63f
        cmpw    $0x805b, (%ecx)         /* OperationRegion */
        jne     62f
        cmpl    %ebx, 2(%ecx)           /* the name */
        jne     62f
        cmpb    $0, 6(%ecx)             /* SystemMemory */
        jne     62f
        movl    $0, region_hi
        movb    7(%ecx), %al
        cmpb    $0x0c, %al              /* DWordPrefix */
        je      61f
        cmpb    $0x0e, %al              /* QWordPrefix */
        jne     62f
        movl    12(%ecx), %eax
        movl    %eax, region_hi
61:     movl    8(%ecx), %eax
        movl    %eax, region_lo
        popl    %edx
        popl    %ecx
        clc
        ret
62:     incl    %ecx
        jmp     60b
63:     popl    %edx
        popl    %ecx
        stc
        ret

/* map_ged: reach the GED register at ged_hi:ged_lo and CH's PCI hotplug registers at
   pcst_hi:pcst_lo (when found) -- one of them above 4 GiB -- by turning on paging.  The
   guest goes on running its 32-bit code in IA-32e compatibility mode (EFER.LME, 4-level
   paging, the same 32-bit code segment): 32-bit PAE paging would do as well on bare KVM, but
   the nested kvm_pvm of our test machines only runs paged guests in long mode (a PAE-paged
   guest triple-faults there as soon as CR0.PG is set; tested).  The low 4 GiB stay
   identity-mapped with 2 MiB pages (code, data, ACPI tables, COM1, PCI BARs all where they
   were), except the 2 MiB windows at GED_WINDOW and PCST_WINDOW -- guest RAM the guest never
   uses (CH: just below its 32-bit device area at 3 GiB) -- which map the 2 MiB frames holding
   the registers, uncached.  ged_addr and pcst_addr = their addresses as the guest reads them
   (pcst_addr 0: not reachable, not used).  CF=1 (paging left off) when the CPU has no long
   mode or the GED's address is past its physical address width. */
#define GED_WINDOW 0xbfe00000
#define PCST_WINDOW 0xbfc00000
map_ged:
        pushl   %ebx
        pushl   %ecx
        pushl   %edx
        pushl   %edi
        movl    ged_lo, %eax            /* below 4 GiB: where it is */
        movl    %eax, ged_addr
        movl    pcst_lo, %eax
        movl    %eax, pcst_addr
        movl    $0x80000000, %eax
        cpuid
        cmpl    $0x80000008, %eax
        jb      66f
        movl    $0x80000001, %eax
        cpuid
        testl   $0x20000000, %edx       /* CPUID.80000001H:EDX.LM */
        jz      66f
        movl    $0x80000008, %eax
        cpuid
        movzbl  %al, %ecx               /* MAXPHYADDR */
        subl    $32, %ecx
        jbe     66f
        movl    ged_hi, %eax
        call    high_fits
        jc      66f
        movl    pcst_hi, %eax
        call    high_fits
        jnc     67f
        call    pcst_unreachable
67:     /* 2048 PDEs: entry i maps i * 2 MiB, P | RW | PS. */
        movl    $page_dirs, %edi
        xorl    %ecx, %ecx
64:     movl    %ecx, %eax
        shll    $21, %eax
        orl     $0x83, %eax
        movl    %eax, (%edi,%ecx,8)
        movl    $0, 4(%edi,%ecx,8)
        incl    %ecx
        cmpl    $2048, %ecx
        jb      64b
        cmpl    $0, ged_hi
        je      69f
        movl    ged_lo, %eax            /* the GED window: P | RW | PWT | PCD | PS */
        andl    $0xffe00000, %eax
        orl     $0x9b, %eax
        movl    %eax, page_dirs + (GED_WINDOW >> 21) * 8
        movl    ged_hi, %eax
        movl    %eax, page_dirs + (GED_WINDOW >> 21) * 8 + 4
        movl    ged_lo, %eax
        andl    $0x1fffff, %eax
        addl    $GED_WINDOW, %eax
        movl    %eax, ged_addr
69:     cmpl    $0, pcst_addr
        je      70f
        cmpl    $0, pcst_hi
        je      70f
        movl    pcst_lo, %eax           /* the PCST window, the same way */
        andl    $0xffe00000, %eax
        orl     $0x9b, %eax
        movl    %eax, page_dirs + (PCST_WINDOW >> 21) * 8
        movl    pcst_hi, %eax
        movl    %eax, page_dirs + (PCST_WINDOW >> 21) * 8 + 4
        movl    pcst_lo, %eax
        andl    $0x1fffff, %eax
        addl    $PCST_WINDOW, %eax
        movl    %eax, pcst_addr
70:     /* 4 PDPTEs, one per page directory, and the PML4's first entry (P | RW). */
        movl    $pdpt, %edi
        xorl    %ecx, %ecx
65:     movl    %ecx, %eax
        shll    $12, %eax
        addl    $page_dirs, %eax
        orl     $3, %eax
        movl    %eax, (%edi,%ecx,8)
        movl    $0, 4(%edi,%ecx,8)
        incl    %ecx
        cmpl    $4, %ecx
        jb      65b
        movl    $pdpt, %eax
        orl     $3, %eax
        movl    %eax, pml4
        movl    $0, pml4+4
        movl    %cr4, %eax
        orl     $0x20, %eax             /* CR4.PAE */
        movl    %eax, %cr4
        movl    $pml4, %eax
        movl    %eax, %cr3
        movl    $0xc0000080, %ecx       /* EFER.LME */
        rdmsr
        orl     $0x100, %eax
        wrmsr
        movl    %cr0, %eax
        orl     $0x80000000, %eax       /* CR0.PG: now in compatibility mode */
        movl    %eax, %cr0
        jmp     68f
68:     popl    %edi
        popl    %edx
        popl    %ecx
        popl    %ebx
        clc
        ret
66:     /* No paging: what lies below 4 GiB is still reachable. */
        cmpl    $0, pcst_hi
        je      71f
        call    pcst_unreachable
71:     cmpl    $0, ged_hi
        jne     72f
        popl    %edi
        popl    %edx
        popl    %ecx
        popl    %ebx
        clc
        ret
72:     movl    $msg_ged_unreachable, %esi
        call    puts
        popl    %edi
        popl    %edx
        popl    %ecx
        popl    %ebx
        stc
        ret

/* high_fits: CF=0 when %eax, the high 32 bits of an address, is below the CPU's physical
   address width (%ecx = MAXPHYADDR - 32, > 0). Keeps %ecx. */
high_fits:
        cmpl    $32, %ecx
        jae     73f
        shrl    %cl, %eax               /* address bits at or above MAXPHYADDR must be 0 */
        testl   %eax, %eax
        jnz     74f
73:     clc
        ret
74:     stc
        ret

/* pcst_unreachable: the PCI hotplug registers are out of reach: say so, never use them. */
pcst_unreachable:
        cmpl    $0, pcst_found
        je      75f
        movl    $0, pcst_addr
        movl    $msg_pcst_unreachable, %esi
        call    puts
75:     ret

/* pwrbtn_poll: the button pressed? Power off, unless ignore-acpi. */
pwrbtn_poll:
        movl    pwrbtn_mode, %eax
        cmpl    $1, %eax
        je      51f
        cmpl    $2, %eax
        jne     52f
        movl    ged_addr, %eax
        movb    (%eax), %al             /* CH: reading returns and clears the flags */
        testb   $0x04, %al              /* PCI_DEVICES_CHANGED */
        jz      58f
        pushl   %eax
        call    pci_hotplug
        popl    %eax
58:     testb   $0x08, %al              /* POWER_BUTTON_CHANGED */
        jz      52f
        jmp     53f
51:     movw    $0x600, %dx             /* QEMU: PM1a_STS.PWRBTN_STS */
        inw     %dx, %ax
        testw   $0x100, %ax
        jz      52f
        movw    $0x100, %ax             /* write 1 to clear */
        outw    %ax, %dx
53:     cmpl    $0, ignore_acpi
        jne     54f
        movl    $msg_pwrbtn, %esi
        call    puts
        jmp     do_poweroff
54:     movl    $msg_pwrbtn_ignored, %esi
        call    puts
52:     ret

/* pci_hotplug: Cloud Hypervisor's GED said PCI_DEVICES_CHANGED.  Do what an ACPI OS does with
   CH's AML (vmm/src/pci_segment.rs, vmm/src/device_manager.rs): for each PCI segment, PCNT
   selects it (PSEG) and reads PCIU (devices added: device check) and PCID (devices to remove:
   eject request), each read clearing the bitmap; the OS answers an eject request with the
   slot's _EJ0, which is PCEJ (slot, segment): PSEG = segment, B0EJ = 1 << slot -- CH then
   ejects the device (DeviceManager::eject_device) and emits vm/device-removed.  The registers
   are 32-bit fields (CH's BusDevice read asserts 4-byte accesses). */
pci_hotplug:
        pushl   %ebx
        cmpl    $0, pcst_addr
        jne     76f
        movl    $msg_pci_no_pcst, %esi
        call    puts
        jmp     79f
76:     movl    $0, pci_seg
77:     movl    pci_seg, %eax
        cmpl    pci_segments, %eax
        jae     79f
        movl    pcst_addr, %ebx
        movl    %eax, 12(%ebx)          /* PSEG */
        movl    (%ebx), %eax            /* PCIU */
        movl    %eax, pci_up
        movl    4(%ebx), %eax           /* PCID */
        movl    %eax, pci_down
78:     bsfl    pci_up, %eax            /* each device added: say so (this guest drives none) */
        jz      80f
        btrl    %eax, pci_up
        movl    %eax, pci_slot
        movl    $msg_pci_added, %esi
        call    pci_say
        jmp     78b
80:     bsfl    pci_down, %eax          /* each device to remove: eject it */
        jz      81f
        btrl    %eax, pci_down
        movl    %eax, pci_slot
        cmpl    $0, no_eject            /* "no-eject": say so, leave it to CH */
        je      83f
        movl    $msg_pci_not_ejected, %esi
        call    pci_say
        jmp     80b
83:     movl    pcst_addr, %ebx
        movl    pci_seg, %edx
        movl    %edx, 12(%ebx)          /* PSEG */
        movl    %eax, %ecx
        movl    $1, %edx
        shll    %cl, %edx
        movl    %edx, 8(%ebx)           /* B0EJ */
        movl    $msg_pci_ejected, %esi
        call    pci_say
        jmp     80b
81:     incl    pci_seg
        jmp     77b
79:     popl    %ebx
        ret

/* pci_say: prints %esi, pci_slot, and " of segment S" when pci_seg is not 0. */
pci_say:
        call    puts
        movl    pci_slot, %eax
        call    put_dec
        cmpl    $0, pci_seg
        je      82f
        movl    $msg_pci_of_segment, %esi
        call    puts
        movl    pci_seg, %eax
        call    put_dec
82:     movl    $msg_crlf, %esi
        jmp     puts

/* ---- heartbeat: TSC, its rate from CPUID ---- */

/* tsc_setup: ticks per heartbeat into beat_ticks (64-bit), first deadline into next_beat. */
tsc_setup:
        pushl   %ebx
        movl    $2000, %esi             /* default: assume 2000 MHz */
        /* Hypervisor timing leaf 0x40000010: EAX = TSC kHz (KVM/CH, VMware-style) */
        movl    $1, %eax
        cpuid
        testl   $0x80000000, %ecx       /* hypervisor present */
        jz      21f
        movl    $0x40000000, %eax
        cpuid
        cmpl    $0x40000010, %eax
        jb      21f
        movl    $0x40000010, %eax
        cpuid
        testl   %eax, %eax
        jz      21f
        xorl    %edx, %edx
        movl    $1000, %ecx
        divl    %ecx                    /* kHz -> MHz */
        testl   %eax, %eax
        jz      21f
        movl    %eax, %esi
        jmp     23f
21:     /* CPUID 0x16: EAX = base frequency in MHz */
        xorl    %eax, %eax
        cpuid
        cmpl    $0x16, %eax
        jb      23f
        movl    $0x16, %eax
        cpuid
        andl    $0xffff, %eax
        jz      23f
        movl    %eax, %esi
23:     movl    %esi, tsc_mhz
        /* beat_ticks = MHz * 1e6 * HEARTBEAT_SECS (64-bit) */
        movl    %esi, %eax
        movl    $1000000*HEARTBEAT_SECS, %ecx
        mull    %ecx
        movl    %eax, beat_ticks
        movl    %edx, beat_ticks+4
        rdtsc
        addl    beat_ticks, %eax
        adcl    beat_ticks+4, %edx
        movl    %eax, next_beat
        movl    %edx, next_beat+4
        popl    %ebx
        ret

heartbeat_poll:
        rdtsc
        cmpl    next_beat+4, %edx
        jb      24f
        ja      25f
        cmpl    next_beat, %eax
        jb      24f
25:     addl    beat_ticks, %eax
        adcl    beat_ticks+4, %edx
        movl    %eax, next_beat
        movl    %edx, next_beat+4
        incl    beat_count
        movl    $msg_heartbeat, %esi
        call    puts
        movl    beat_count, %eax
        call    put_dec
        movl    $msg_crlf, %esi
        call    puts
24:     ret

/* settle: spin about 1 s (a quarter heartbeat): a VMM acts on a power request
   asynchronously, so the vCPU may run on for a while before it is stopped. */
settle:
        movl    beat_ticks+4, %edx
        movl    beat_ticks, %eax
        shrdl   $2, %edx, %eax
        shrl    $2, %edx
        movl    %eax, %esi
        movl    %edx, %edi
        rdtsc
        addl    %esi, %eax
        adcl    %edi, %edx
        movl    %eax, %esi              /* deadline in %edi:%esi */
        movl    %edx, %edi
33:     pause
        rdtsc
        cmpl    %edi, %edx
        jb      33b
        ja      34f
        cmpl    %esi, %eax
        jb      33b
34:     ret

/* ---- COM1 ---- */

uart_init:
        movw    $COM1+1, %dx            /* IER: no interrupts */
        xorb    %al, %al
        outb    %al, %dx
        movw    $COM1+3, %dx            /* LCR: DLAB */
        movb    $0x80, %al
        outb    %al, %dx
        movw    $COM1+0, %dx            /* divisor 1: 115200 baud */
        movb    $1, %al
        outb    %al, %dx
        movw    $COM1+1, %dx
        xorb    %al, %al
        outb    %al, %dx
        movw    $COM1+3, %dx            /* 8N1 */
        movb    $0x03, %al
        outb    %al, %dx
        movw    $COM1+2, %dx            /* FIFO on, cleared */
        movb    $0xc7, %al
        outb    %al, %dx
        movw    $COM1+4, %dx            /* DTR, RTS, OUT2 */
        movb    $0x0b, %al
        outb    %al, %dx
        ret

/* putc: %al. Keeps every register. */
putc:
        pushl   %edx
        pushl   %ecx
        pushl   %eax
        movl    $100000, %ecx           /* bounded wait for THRE */
        movw    $COM1+5, %dx
26:     inb     %dx, %al
        testb   $0x20, %al
        jnz     27f
        pause
        loop    26b
27:     popl    %eax
        movw    $COM1, %dx
        outb    %al, %dx
        popl    %ecx
        popl    %edx
        ret

/* puts: %esi = NUL-terminated string. */
puts:
        pushl   %eax
28:     movb    (%esi), %al
        testb   %al, %al
        jz      29f
        call    putc
        incl    %esi
        jmp     28b
29:     popl    %eax
        ret

/* uart_drain: wait until the transmitter is empty (LSR bit 6), bounded. */
uart_drain:
        movl    $1000000, %ecx
        movw    $COM1+5, %dx
30:     inb     %dx, %al
        testb   $0x40, %al
        jnz     31f
        pause
        loop    30b
31:     ret

/* put_hex: print %eax as 8 hex digits. Keeps %ebx, %esi, %edi, %ebp. */
put_hex:
        movl    $8, %ecx
35:     roll    $4, %eax
        movl    %eax, %edx
        andl    $0xf, %edx
        pushl   %eax
        movb    hex_digits(%edx), %al
        call    putc
        popl    %eax
        loop    35b
        ret

/* put_dec: print %eax in decimal. */
put_dec:
        pushl   %ebx
        movl    $dec_buf+11, %edi
        movb    $0, (%edi)
        movl    $10, %ebx
32:     xorl    %edx, %edx
        divl    %ebx
        addb    $'0', %dl
        decl    %edi
        movb    %dl, (%edi)
        testl   %eax, %eax
        jnz     32b
        movl    %edi, %esi
        call    puts
        popl    %ebx
        ret

/* ---- data ---- */
        .section .rodata
msg_banner:     .asciz  "\r\nch-launcher PVH test guest: hello from COM1\r\n"
msg_cmdline:    .asciz  "cmdline: "
msg_crlf:       .asciz  "\r\n"
msg_ready:      .asciz  "guest ready: type poweroff, reboot, panic or ping\r\n"
msg_heartbeat:  .asciz  "heartbeat "
msg_pong:       .asciz  "pong\r\n"
msg_poweroff:   .asciz  "guest: powering off\r\n"
msg_reboot:     .asciz  "guest: rebooting\r\n"
msg_panic:      .asciz  "guest: panicking (pvpanic)\r\n"
msg_panicked:   .asciz  "guest: panic signalled, halting\r\n"
msg_still_here: .asciz  "guest: still running after the request, halting\r\n"
msg_pwrbtn:     .asciz  "guest: ACPI power button: powering off\r\n"
msg_pwrbtn_ignored: .asciz "guest: ignoring the power button\r\n"
msg_ged:        .asciz  "guest: ACPI power button: Cloud Hypervisor GED register at 0x"
msg_ged_unreachable: .asciz "guest: ACPI power button: the GED register is out of reach, not polled\r\n"
msg_pcst:       .asciz  "guest: ACPI PCI hotplug: Cloud Hypervisor PCST registers at 0x"
msg_pcst_segments: .asciz ", PCI segments: "
msg_pcst_unreachable: .asciz "guest: ACPI PCI hotplug: the PCST registers are out of reach, devices are not ejected\r\n"
msg_pci_no_pcst: .asciz "guest: ACPI PCI hotplug: PCI devices changed, but no PCST registers: nothing ejected\r\n"
msg_pci_added:  .asciz  "guest: ACPI PCI hotplug: added slot "
msg_pci_ejected: .asciz "guest: ACPI PCI hotplug: ejected slot "
msg_pci_of_segment: .asciz " of segment "
msg_pci_not_ejected: .asciz "guest: ACPI PCI hotplug: not ejecting (no-eject) slot "
hex_digits:     .ascii  "0123456789abcdef"
word_ignore_acpi: .asciz "ignore-acpi"
word_no_eject:  .asciz  "no-eject"
word_poweroff:  .asciz  "poweroff"
word_reboot:    .asciz  "reboot"
word_panic:     .asciz  "panic"
word_ping:      .asciz  "ping"
        .balign 4
cmd_table:
        .long   word_poweroff, do_poweroff
        .long   word_reboot, do_reboot
        .long   word_panic, do_panic
        .long   word_ping, do_ping
        .long   word_ignore_acpi, do_ignore_acpi
        .long   word_no_eject, do_no_eject
        .long   0, 0

        .bss
        .balign 16
start_info:     .skip 4
cmdline:        .skip 4
line_len:       .skip 4
beat_count:     .skip 4
tsc_mhz:        .skip 4
ged_addr:       .skip 4                 /* where the guest reads it (a paged window above 4 GiB) */
ged_lo:         .skip 4                 /* its physical address, from the AML */
ged_hi:         .skip 4
ged_found:      .skip 4
region_lo:      .skip 4                 /* aml_find_region's answer */
region_hi:      .skip 4
pcst_addr:      .skip 4                 /* CH's PCI hotplug registers as the guest reads them, 0: none */
pcst_lo:        .skip 4                 /* their physical address, from the AML */
pcst_hi:        .skip 4
pcst_found:     .skip 4
pci_segments:   .skip 4                 /* from the MCFG table, else 1 */
pci_seg:        .skip 4
pci_slot:       .skip 4
pci_up:         .skip 4
pci_down:       .skip 4
pwrbtn_mode:    .skip 4                 /* 0 none, 1 QEMU PM1 at 0x600, 2 CH GED at ged_addr */
ignore_acpi:    .skip 4
no_eject:       .skip 4                 /* the word no-eject: PCI devices are not ejected */
        .balign 8
beat_ticks:     .skip 8
next_beat:      .skip 8
dec_buf:        .skip 12
line_buf:       .skip 260
        .balign 4096                    /* page tables, only when the GED is above 4 GiB */
pml4:           .skip 4096
pdpt:           .skip 4096
page_dirs:      .skip 4 * 4096
        .balign 16
stack:          .skip 16384
stack_top:
