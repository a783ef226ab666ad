/* Dumps PCRE2's view of the Unicode classes the tokenizer regexes use: one
 * line "<code point> <mask>" for each code point in any of them (bits: L, N,
 * M, Lu, Lt, Lm, Lo, Ll). Input for unicode_delta.js; not part of the build.
 *   gcc -O2 tests/tok/pcre_classes.c -lpcre2-8 -o /tmp/pcre_classes
 *   /tmp/pcre_classes > /tmp/pcre_classes.txt */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
static const char *cls[] = {"\\p{L}","\\p{N}","\\p{M}","\\p{Lu}","\\p{Lt}","\\p{Lm}","\\p{Lo}","\\p{Ll}"};
int main(void) { pcre2_code *re[8]; int e; PCRE2_SIZE o;
 for(int k=0;k<8;k++){ char p[32]; snprintf(p,32,"^%s",cls[k]); re[k]=pcre2_compile((PCRE2_SPTR)p,PCRE2_ZERO_TERMINATED,PCRE2_UTF|PCRE2_UCP,&e,&o,NULL);}
 pcre2_match_data*md=pcre2_match_data_create(4,NULL);
 for(unsigned cp=0;cp<=0x10FFFF;cp++){ if(cp>=0xD800&&cp<=0xDFFF) continue; unsigned char b[4]; int n;
  if(cp<0x80){b[0]=cp;n=1;} else if(cp<0x800){b[0]=0xC0|cp>>6;b[1]=0x80|(cp&63);n=2;} else if(cp<0x10000){b[0]=0xE0|cp>>12;b[1]=0x80|(cp>>6&63);b[2]=0x80|(cp&63);n=3;} else {b[0]=0xF0|cp>>18;b[1]=0x80|(cp>>12&63);b[2]=0x80|(cp>>6&63);b[3]=0x80|(cp&63);n=4;}
  int m=0; for(int k=0;k<8;k++) if(pcre2_match(re[k],b,n,0,0,md,NULL)>=0) m|=1<<k; if(m) printf("%u %d\n",cp,m);}
 return 0;}
