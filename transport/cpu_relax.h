/* One turn of a busy wait: tells the CPU (and a hypervisor watching for
 * spinning) that this thread waits on memory another one writes. */
#ifndef FERRY_TRANSPORT_CPU_RELAX_H
#define FERRY_TRANSPORT_CPU_RELAX_H

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
