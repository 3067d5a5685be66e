// rmqfs oracle shim (our code): the fastjson annotation RocketMQ 4.9.8 puts on getters that must
// not be serialized (@JSONField(serialize = false)); JSON honours serialize only.
package com.alibaba.fastjson.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.FIELD, ElementType.PARAMETER})
public @interface JSONField {
    String name() default "";

    boolean serialize() default true;

    boolean deserialize() default true;
}
